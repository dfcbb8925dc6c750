"""Whether this process runs in a container, read from its mounts: a host that runs containers is still a host."""

from sandbox.lifecycle.owner import container_id_from_mountinfo

OTHER = "942501cffce990bf9f846654d83ca3a03d9494dd5f1d8279e638d08a6f77e4aa"
OWN = "d5f691ace2235f1b3159f7ce75205ae0e161176a50dbf772df8c69a93f7fa566"

HOST = f"""\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
29 22 0:26 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw
412 22 0:61 / /var/lib/docker/containers/{OTHER}/mounts/shm rw,nosuid,nodev,noexec shared:210 - tmpfs shm rw,size=65536k
430 22 0:63 / /var/lib/docker/overlay2/abc/merged rw,relatime shared:220 - overlay overlay rw,lowerdir=/x
"""

CONTAINER = f"""\
612 540 0:63 / / rw,relatime master:220 - overlay overlay rw,lowerdir=/x
650 612 259:1 /var/lib/docker/containers/{OWN}/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/root rw
651 612 259:1 /var/lib/docker/containers/{OWN}/hostname /etc/hostname rw,relatime - ext4 /dev/root rw
652 612 259:1 /var/lib/docker/containers/{OWN}/hosts /etc/hosts rw,relatime - ext4 /dev/root rw
"""


def test_a_host_running_other_containers_is_no_container():
    assert container_id_from_mountinfo(HOST) is None


def test_a_container_is_known_by_the_files_docker_mounts_into_it():
    assert container_id_from_mountinfo(CONTAINER) == OWN


def test_the_reaper_says_why_each_container_is_an_orphan_and_leaves_held_ones_alone():
    import socket
    import time

    from sandbox.lifecycle.memory_backend import MemoryBackend
    from sandbox.lifecycle.reaper import Reaper

    backend = MemoryBackend({"image": {}})
    reaper = Reaper(backend, creation_grace_s=30.0)
    now = time.time()

    def container(owner: str, age_s: float, container_id: str = "c" * 64) -> dict:
        return {"Id": container_id, "Labels": {"regrow.owner": owner}, "Created": now - age_s}

    dead = f"{socket.gethostname()}:999999999:1"
    assert reaper.orphan_reason(container(dead, 5), now) == f"its owner {dead!r} is not alive"
    assert reaper.orphan_reason(container(backend.owner, 60), now) == f"ours ({backend.owner}) but untracked, 60 s old"
    assert reaper.orphan_reason(container(backend.owner, 5), now) is None  # may be one we are creating now
    held = backend.create("image")
    assert reaper.orphan_reason(container(backend.owner, 60, held.id), now) is None
    assert reaper.orphan_reason(container("elsewhere:1:1", 10**6), now) is None  # no TTL: not ours to judge


def test_after_an_engine_restart_only_a_container_being_created_now_is_spared_as_stopped():
    import time

    from sandbox.lifecycle.owner import CREATION_LABEL
    from sandbox.lifecycle.reaper import Reaper

    class Listing:
        """A backend whose listing shows, beside a dead one, three containers that never started: one whose create
        request is still in flight, one tracked, and one a moment old whose create the engine's stop cut off."""

        owner = "here:1:1"

        def containers_labelled(self, labels):
            now = time.time()
            return [
                {"Id": "being-made", "State": "created", "Created": now, "Labels": {CREATION_LABEL: "c1"}},
                {"Id": "tracked", "State": "created", "Created": now - 600, "Labels": {CREATION_LABEL: "c2"}},
                {"Id": "cut-off", "State": "created", "Created": now, "Labels": {CREATION_LABEL: "c3"}},
                {"Id": "dead", "State": "exited", "Created": now, "Labels": {}},
            ]

        def live_ids(self):
            return {"tracked"}

        def creations_in_flight(self):
            return {"c1"}

        def remove(self, container_id):
            return True

    backend = Listing()
    assert Reaper(backend).reap_stopped({"regrow.server": "s"}) == ["cut-off", "dead"]  # type: ignore[arg-type]
