"""Lifecycle: engine errors, containers that vanish, the warm pool and the reaper."""

import socket
import threading
import uuid

import pytest

from sandbox import DockerBackend, DockerUnavailable, ImageNotFound, Reaper, SandboxGone, WarmPool


def test_unreachable_engine_gets_an_actionable_error():
    with pytest.raises(DockerUnavailable, match="docker info"):
        DockerBackend(base_url="unix:///nonexistent/docker.sock")


def test_missing_image_gets_an_actionable_error(docker_backend):
    with pytest.raises(ImageNotFound, match="regrow images build"):
        docker_backend.create("regrow/no-such-image:0")


@pytest.mark.parametrize("make", ["sandbox", "stopped"])
def test_a_create_interrupted_after_the_engine_made_the_container_leaves_none(base_image, make):
    """SIGTERM landing while the engine answered a create left a 'created' container no one knew the id of (CI saw it
    after `regrow bench synth` was stopped)."""
    backend = DockerBackend()
    real_create = backend.api.create_container
    mark = uuid.uuid4().hex

    def create_then_interrupted(*args, **kwargs):
        real_create(*args, **{**kwargs, "labels": {**kwargs["labels"], "regrow.test": mark}})
        raise KeyboardInterrupt

    backend.api.create_container = create_then_interrupted
    with pytest.raises(KeyboardInterrupt):
        backend.create(base_image) if make == "sandbox" else backend.create_stopped(base_image)
    assert backend.api.containers(all=True, filters={"label": f"regrow.test={mark}"}) == []
    assert backend.live_ids() == set()


def test_container_killed_from_outside_raises_sandbox_gone(docker_backend, base_image):
    sb = docker_backend.create(base_image)
    docker_backend.api.remove_container(sb.id, force=True)
    with pytest.raises(SandboxGone):
        sb.exec("true")
    with pytest.raises(SandboxGone):
        sb.read_file("/etc/hostname")
    sb.destroy()
    with docker_backend.create(base_image) as fresh:
        assert fresh.exec("echo ok").stdout == "ok\n"


def test_stopped_container_raises_sandbox_gone(docker_backend, base_image):
    with docker_backend.create(base_image) as sb:
        docker_backend.api.kill(sb.id)
        with pytest.raises(SandboxGone):
            sb.exec("true")


def test_warm_pool_hands_out_distinct_containers_under_concurrency(docker_backend, base_image):
    handed: list[str] = []
    lock = threading.Lock()
    with WarmPool(docker_backend, base_image, size=3) as pool:
        pool.wait_ready()

        def take():
            sandbox = pool.acquire()
            with lock:
                handed.append(sandbox)

        threads = [threading.Thread(target=take) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ids = [sandbox.id for sandbox in handed]
        assert len(ids) == 8 and len(set(ids)) == 8
        assert all(sandbox.exec("true").exit_code == 0 for sandbox in handed)
        for sandbox in handed:
            sandbox.destroy()


def test_warm_pool_prepares_every_container_and_destroys_one_it_cannot_prepare(docker_backend, base_image):
    with WarmPool(
        docker_backend, base_image, size=2, prepare=lambda sb: sb.write_file("/workspace/ready", "yes")
    ) as pool:
        assert pool.wait_ready()
        first, second, third = pool.acquire(), pool.acquire(), pool.acquire()  # the third is made on the spot
        for sandbox in (first, second, third):
            assert sandbox.read_file("/workspace/ready") == b"yes"
            sandbox.destroy()
    made = []

    def broken(sandbox):
        made.append(sandbox.id)
        raise OSError("the install archive is missing")

    with WarmPool(docker_backend, base_image, size=0, prepare=broken) as pool, pytest.raises(OSError, match="missing"):
        pool.acquire()
    assert made and made[0] not in docker_backend.live_ids()


def test_reaper_removes_orphans_and_keeps_live_containers(docker_backend, base_image):
    dead_owner = f"{socket.gethostname()}:999999999:1"
    orphan = docker_backend.api.create_container(
        base_image, ["sleep", "infinity"], labels={"regrow.managed": "1", "regrow.owner": dead_owner}
    )["Id"]
    leaked = docker_backend.create(base_image)
    docker_backend._live.discard(leaked.id)  # as if its episode ended without destroying it
    with docker_backend.create(base_image) as live:
        reaped = Reaper(docker_backend, creation_grace_s=0).reap_once()
        assert orphan in reaped and leaked.id in reaped
        assert live.id not in reaped
        assert live.exec("true").exit_code == 0
    remaining = {c["Id"] for c in docker_backend.managed_containers()}
    assert orphan not in remaining and leaked.id not in remaining


def test_reaper_leaves_containers_of_other_hosts_alone_without_a_ttl(docker_backend, base_image):
    foreign = docker_backend.api.create_container(
        base_image, ["sleep", "infinity"], labels={"regrow.managed": "1", "regrow.owner": "elsewhere:1:1"}
    )["Id"]
    try:
        assert foreign not in Reaper(docker_backend, creation_grace_s=0).reap_once()
        assert foreign in Reaper(docker_backend, foreign_ttl_s=-1).reap_once()
    finally:
        docker_backend.remove(foreign)


def test_reaper_judges_a_containerised_owner_by_its_container(docker_backend, base_image):
    with docker_backend.create(base_image) as owner_box:
        owned_by_live = docker_backend.api.create_container(
            base_image,
            ["sleep", "infinity"],
            labels={"regrow.managed": "1", "regrow.owner": "box:1:1", "regrow.owner.container": owner_box.id},
        )["Id"]
        owned_by_gone = docker_backend.api.create_container(
            base_image,
            ["sleep", "infinity"],
            labels={"regrow.managed": "1", "regrow.owner": "box:1:1", "regrow.owner.container": "f" * 64},
        )["Id"]
        try:
            reaped = Reaper(docker_backend, creation_grace_s=0).reap_once()
            assert owned_by_gone in reaped and owned_by_live not in reaped
        finally:
            docker_backend.remove(owned_by_live)
            docker_backend.remove(owned_by_gone)
