"""The Docker socket proxy: regrow's sandboxes work through it, and nothing that could reach the host gets through."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import uuid

import docker.errors
import docker.types
import pytest

from sandbox import DockerBackend, Limits, Reaper, SandboxFileNotFound
from sandbox.lifecycle.owner import MANAGED_LABEL, OWNER_CONTAINER_LABEL, OWNER_LABEL
from sandbox.proxy.policy import Refused, route_request
from sandbox.proxy.server import DockerProxy, ProxySettings
from tests.live_process import free_port, stop

pytestmark = pytest.mark.docker


class ProxyInThread:
    """A DockerProxy on 127.0.0.1 (a port of its own) served by an event loop in a background thread."""

    def __init__(self, **settings: object):
        self.loop = asyncio.new_event_loop()
        self.proxy = DockerProxy(ProxySettings(**{"listen": "tcp://127.0.0.1:0", **settings}))
        self.thread = threading.Thread(target=self.loop.run_forever, name="docker-proxy", daemon=True)

    def __enter__(self) -> ProxyInThread:
        self.loop.run_until_complete(self.proxy.start())
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self.loop).result(timeout=30)
        leftover = asyncio.run_coroutine_threadsafe(_other_tasks(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
        assert leftover == [], f"the proxy left tasks running: {leftover}"

    @property
    def address(self) -> str:
        return self.proxy.address

    def wait_idle(self, timeout_s: float = 10.0) -> int:
        """Open client connections once they have all ended (or the timeout passed)."""
        deadline = time.monotonic() + timeout_s
        while self.proxy.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.proxy.open_connections


async def _other_tasks() -> list[asyncio.Task]:
    await asyncio.sleep(0)  # let cancelled tasks finish
    return [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]


def exchange(address: str, data: bytes, timeout_s: float = 20.0) -> bytes:
    """Send raw bytes to the proxy and read until it closes the connection."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
        conn.sendall(data)
        received = bytearray()
        while chunk := conn.recv(65536):
            received += chunk
    return bytes(received)


def request(method: str, path: str, body: bytes = b"", headers: str = "") -> bytes:
    length = f"Content-Length: {len(body)}\r\n" if body or method in ("POST", "PUT") else ""
    return f"{method} {path} HTTP/1.1\r\nHost: docker\r\n{headers}{length}\r\n".encode() + body


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def message_of(response: bytes) -> str:
    return json.loads(response.split(b"\r\n\r\n", 1)[1])["message"]


@pytest.fixture(scope="module")
def proxy(docker_backend):
    with ProxyInThread() as running:
        yield running
    assert running.proxy.open_connections == 0


@pytest.fixture(scope="module")
def proxied(proxy) -> DockerBackend:
    """A DockerBackend that reaches the engine only through the proxy."""
    return DockerBackend(base_url=proxy.address)


@pytest.fixture
def unmanaged(docker_backend, base_image):
    """A running container without regrow's label, made straight on the engine and removed afterwards."""
    container_id = docker_backend.api.create_container(
        base_image, ["sleep", "infinity"], labels={"regrow.test": "unmanaged"}
    )["Id"]
    try:
        docker_backend.api.start(container_id)
        yield container_id
    finally:
        docker_backend.api.remove_container(container_id, force=True)


def _running(docker_backend, container_id: str) -> bool:
    return docker_backend.api.inspect_container(container_id)["State"]["Running"]


def test_a_sandbox_lives_its_whole_life_through_the_proxy(proxied, docker_backend, base_image):
    with proxied.create(base_image, limits=Limits(memory_bytes=256 * 2**20, output_cap_bytes=4096)) as sb:
        assert docker_backend.api.inspect_container(sb.id)["Config"]["Labels"][MANAGED_LABEL] == "1"
        hello = sb.exec("echo out; echo err >&2; exit 3")
        assert (hello.exit_code, hello.stdout, hello.stderr) == (3, "out\n", "err\n")
        slow = sb.exec("sleep 30", timeout=1)
        assert slow.timed_out and slow.exit_code == 124
        chatty = sb.exec("head -c 1000000 /dev/zero | tr '\\0' x")
        assert chatty.exit_code == 0 and chatty.truncated and chatty.stdout == "x" * 4096
        sb.write_file("/workspace/pkg/a.py", "x = 1\n")
        assert sb.read_file("/workspace/pkg/a.py") == b"x = 1\n"
        assert [entry.name for entry in sb.list_dir("/workspace")] == ["pkg"]
        with pytest.raises(SandboxFileNotFound):
            sb.read_file("/workspace/missing.py")
        assert sb.id in {c["Id"] for c in proxied.managed_containers()}
    assert docker_backend.api.containers(all=True, filters={"id": sb.id}) == []


def test_a_sandbox_is_reached_by_name_and_the_engine_gets_its_full_id(proxied, base_image):
    name = f"regrow-proxy-test-{uuid.uuid4().hex[:8]}"
    labels = {MANAGED_LABEL: "1", OWNER_LABEL: proxied.owner}
    container_id = proxied.api.create_container(base_image, ["sleep", "infinity"], name=name, labels=labels)["Id"]
    try:
        proxied.api.start(name)
        assert proxied.api.inspect_container(name)["Id"] == container_id
        assert proxied.api.inspect_container(container_id[:12])["State"]["Running"] is True
    finally:
        proxied.api.remove_container(name, force=True)
    with pytest.raises(docker.errors.NotFound):
        proxied.api.inspect_container(container_id)


def test_the_reaper_lists_and_judges_owners_through_the_proxy(proxied, docker_backend, base_image, unmanaged):
    foreign = proxied.api.inspect_container(unmanaged)
    assert set(foreign) == {"Id", "State"} and set(foreign["State"]) == {"Status", "Running"}
    assert foreign["State"]["Running"] is True
    owned = {}
    for case, owner_container in (("live", unmanaged), ("gone", "f" * 64)):
        labels = {MANAGED_LABEL: "1", OWNER_LABEL: "box:1:1", OWNER_CONTAINER_LABEL: owner_container}
        owned[case] = proxied.api.create_container(base_image, ["sleep", "infinity"], labels=labels)["Id"]
    try:
        reaped = Reaper(proxied, creation_grace_s=0).reap_once()
        assert owned["gone"] in reaped and owned["live"] not in reaped
    finally:
        for container_id in owned.values():
            proxied.remove(container_id)


REFUSED_CREATES = {
    "privileged": ({"privileged": True}, "Privileged"),
    "bind_mount": ({"binds": {"/": {"bind": "/host", "mode": "rw"}}}, "Binds"),
    "volume_mount": ({"mounts": [docker.types.Mount("/data", "somevolume")]}, "Mounts"),
    "host_network": ({"network_mode": "host"}, "NetworkMode"),
    "host_pid": ({"pid_mode": "host"}, "PidMode"),
    "cap_add": ({"cap_add": ["SYS_ADMIN"]}, "CapAdd"),
    "unconfined_seccomp": ({"security_opt": ["seccomp=unconfined"]}, "SecurityOpt"),
    "devices": ({"devices": ["/dev/sda:/dev/sda:rwm"]}, "Devices"),
    "published_port": ({"port_bindings": {2375: 2375}}, "PortBindings"),
    "other_runtime": ({"runtime": "runsc"}, "Runtime"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_CREATES))
def test_a_create_that_could_reach_the_host_is_refused(case, proxied, docker_backend, base_image, caplog):
    options, field_name = REFUSED_CREATES[case]
    tag = uuid.uuid4().hex
    labels = {MANAGED_LABEL: "1", OWNER_LABEL: proxied.owner, "regrow.test": tag}
    with caplog.at_level(logging.WARNING, logger="sandbox.proxy.server"):
        with pytest.raises(docker.errors.APIError) as refused:
            proxied.api.create_container(
                base_image, ["true"], labels=labels, host_config=proxied.api.create_host_config(**options)
            )
    assert refused.value.status_code == 403
    assert f"regrow docker proxy refused POST /containers/create: HostConfig.{field_name}" in refused.value.explanation
    assert any("regrow docker proxy refused" in record.getMessage() for record in caplog.records)
    assert docker_backend.api.containers(all=True, filters={"label": f"regrow.test={tag}"}) == []


def test_a_create_without_the_managed_label_is_refused(proxied, base_image):
    with pytest.raises(docker.errors.APIError, match=f"lacks the label {MANAGED_LABEL}=1") as refused:
        proxied.api.create_container(base_image, ["true"], labels={"regrow.test": "unlabelled"})
    assert refused.value.status_code == 403


@pytest.mark.parametrize(
    "body",
    [
        {"Privileged": True},  # engines before API 1.44 read host settings from the top level
        {"hostconfig": {"privileged": True}},  # the engine matches field names without regard to case
        {"HostConfig": {"NetworkMode": "container:abc"}},
        {"HostConfig": {"MaskedPaths": []}},
        {"HostConfig": {}, "NetworkingConfig": {"EndpointsConfig": {"regrow_default": {}}}},
        {"HostConfig": {"LogConfig": {"Type": "gelf", "Config": {"gelf-address": "udp://192.0.2.1:12201"}}}},
        {"HostConfig": {"Links": ["env-server:peek"]}},
    ],
    ids=["top_level", "lower_case", "container_network", "unmasked_proc", "other_network", "remote_logs", "links"],
)
def test_a_create_body_that_hides_host_access_is_refused(proxy, docker_backend, base_image, body):
    labels = {MANAGED_LABEL: "1", OWNER_LABEL: docker_backend.owner}
    payload = json.dumps({"Image": base_image, "Labels": labels, **body}).encode()
    response = exchange(
        proxy.address, request("POST", "/v1.41/containers/create", payload, "Content-Type: application/json\r\n")
    )
    if status_of(response) == 201:
        docker_backend.remove(json.loads(response.split(b"\r\n\r\n", 1)[1])["Id"])
    assert status_of(response) == 403, response
    assert message_of(response).startswith("regrow docker proxy refused POST /containers/create: ")


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("POST", "/containers/abc/../../images/create"),
        ("POST", "/containers/abc%2F..%2F..%2Fimages%2Fcreate"),
        ("GET", "http://docker/containers/json?filters=%7B%7D"),
        ("GET", "/v1.41//_ping"),
        ("POST", "/v1.41/containers/abc/attach"),
        ("POST", "/v1.41/containers/abc/exec/"),
        ("POST", "/build"),
        ("POST", "/v1.41/containers/abc%00/start"),
        ("post", "/v1.41/containers/abc/start"),
    ],
)
def test_paths_outside_the_allowed_routes_are_refused(method, target):
    with pytest.raises(Refused):
        route_request(method, target)


def test_the_engine_gets_the_path_the_proxy_checked():
    route = route_request("POST", "/v1.41/containers/sand%62ox/start?t=1&t=2")
    assert (route.ref, route.target("f" * 64)) == ("sandbox", f"/v1.41/containers/{'f' * 64}/start?t=1&t=2")


def test_json_keys_that_differ_only_in_case_are_refused(proxy, base_image):
    payload = (
        f'{{"Image": "{base_image}", "Labels": {{"{MANAGED_LABEL}": "1"}}, "HostConfig": {{}}, "hostConfig": {{}}}}'
    )
    response = exchange(
        proxy.address, request("POST", "/containers/create", payload.encode(), "Content-Type: application/json\r\n")
    )
    assert status_of(response) == 400 and "duplicate or non-ASCII key" in message_of(response)


def test_an_unmanaged_container_cannot_be_touched(proxied, docker_backend, unmanaged):
    for attempt in (
        lambda: proxied.api.exec_create(unmanaged, ["true"]),
        lambda: proxied.api.kill(unmanaged),
        lambda: proxied.api.get_archive(unmanaged, "/etc/hostname"),
        lambda: proxied.api.remove_container(unmanaged, force=True),
    ):
        with pytest.raises(docker.errors.APIError, match=f"does not carry the label {MANAGED_LABEL}=1") as refused:
            attempt()
        assert refused.value.status_code == 403
    assert _running(docker_backend, unmanaged)


def test_an_exec_made_on_the_engine_for_an_unmanaged_container_cannot_be_started(proxied, docker_backend, unmanaged):
    exec_id = docker_backend.api.exec_create(unmanaged, ["true"])["Id"]
    with pytest.raises(docker.errors.APIError, match="does not carry the label") as refused:
        proxied.api.exec_start(exec_id)
    assert refused.value.status_code == 403
    with pytest.raises(docker.errors.APIError, match="does not carry the label"):
        proxied.api.exec_inspect(exec_id)


def test_a_privileged_exec_is_refused(proxied, base_image):
    with proxied.create(base_image) as sb:
        with pytest.raises(docker.errors.APIError, match="privileged execs") as refused:
            proxied.api.exec_create(sb.id, ["true"], privileged=True)
        assert refused.value.status_code == 403


def test_pulling_an_image_is_refused(proxied):
    with pytest.raises(
        docker.errors.APIError, match="refused POST /images/create: regrow's sandboxes never use"
    ) as refused:
        proxied.api.pull("busybox", tag="latest")
    assert refused.value.status_code == 403


def test_listing_containers_needs_the_managed_label_filter(proxied):
    for listing in (
        lambda: proxied.api.containers(all=True),
        lambda: proxied.api.containers(filters={"label": "other=1"}),
    ):
        with pytest.raises(
            docker.errors.APIError, match=f"not restricted to label {MANAGED_LABEL}=1|exactly one filters"
        ):
            listing()
    assert isinstance(proxied.managed_containers(), list)


def test_a_listing_by_any_label_goes_through_the_proxy_and_finds_only_managed_containers(
    proxied, base_image, unmanaged
):
    # The env server lists its own containers by its server label; the proxy refuses a listing not limited to
    # regrow.managed=1, and that 403 kept every server behind the proxy unhealthy after its first engine check.
    marker = {"regrow.test.listing": uuid.uuid4().hex}
    sandbox = proxied.create(base_image, labels=marker)
    try:
        listed = proxied.containers_labelled(marker)
        assert [c["Id"] for c in listed] == [sandbox.id]
        assert proxied.containers_labelled({"regrow.test": "unmanaged"}) == []
    finally:
        sandbox.destroy()


def test_a_pipelined_second_request_is_never_forwarded(proxy, docker_backend, unmanaged):
    smuggled = request("POST", f"/v1.41/containers/{unmanaged}/kill")
    response = exchange(proxy.address, request("GET", "/_ping") + smuggled)
    assert status_of(response) == 200 and response.count(b"HTTP/1.1") == 1
    length_and_chunked = (
        b"POST /v1.41/containers/create HTTP/1.1\r\nHost: docker\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    )
    response = exchange(proxy.address, length_and_chunked + smuggled)
    assert status_of(response) == 400 and "both Content-Length and Transfer-Encoding" in message_of(response)
    time.sleep(0.5)
    assert _running(docker_backend, unmanaged)


def test_bytes_after_an_exec_start_never_become_a_request(proxy, proxied, docker_backend, base_image, unmanaged):
    upgrade = "Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Type: application/json\r\n"
    smuggled = request("POST", f"/v1.41/containers/{unmanaged}/kill")
    with proxied.create(base_image) as sb:
        running = proxied.api.exec_create(sb.id, ["sleep", "1"])["Id"]
        start = request("POST", f"/v1.41/exec/{running}/start", b'{"Detach":false,"Tty":false}', upgrade)
        assert exchange(proxy.address, start + smuggled).startswith(b"HTTP/1.1 101")  # the bytes went to its stdin
        orphaned = proxied.api.exec_create(sb.id, ["true"])["Id"]
    start = request("POST", f"/v1.41/exec/{orphaned}/start", b'{"Detach":false,"Tty":false}', upgrade)
    response = exchange(proxy.address, start + smuggled)  # its container is gone: the engine answers 404, no upgrade
    assert status_of(response) == 404 and response.count(b"HTTP/1.1") == 1
    time.sleep(0.5)
    assert _running(docker_backend, unmanaged)


def test_an_unreachable_engine_gets_a_502_with_the_remedy():
    with ProxyInThread(engine="unix:///nonexistent/docker.sock") as down:
        response = exchange(down.address, request("GET", "/_ping"))
    assert status_of(response) == 502
    assert "cannot reach the Docker engine at unix:///nonexistent/docker.sock" in message_of(response)


def test_slow_oversized_and_vanishing_clients_are_cut_off_cleanly(docker_backend, base_image):
    with ProxyInThread(head_timeout_s=0.5, max_head_kib=4, max_body_mib=1) as small:
        slow = exchange(small.address, b"GET /_ping HTTP/1.1\r\nHost: doc")
        assert status_of(slow) == 408
        huge_head = exchange(
            small.address, b"GET /_ping HTTP/1.1\r\nHost: docker\r\nX-Pad: " + b"a" * 8192 + b"\r\n\r\n"
        )
        assert status_of(huge_head) == 431 and "REGROW_PROXY_MAX_HEAD_KIB" in message_of(huge_head)
        huge_body = exchange(small.address, request("POST", "/containers/create", b"{" + b" " * (2 * 2**20) + b"}"))
        assert status_of(huge_body) == 413
        host, port = small.address.removeprefix("tcp://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as half:  # a body that never arrives
            half.sendall(
                b"PUT /containers/x/archive?path=/tmp HTTP/1.1\r\nHost: docker\r\nContent-Length: 1000\r\n\r\nabc"
            )
        backend = DockerBackend(base_url=small.address)
        with backend.create(base_image) as sb:
            with socket.create_connection((host, int(port))) as waiting:  # hangs up while the engine still works on it
                waiting.sendall(request("POST", f"/containers/{sb.id}/wait"))
                time.sleep(0.3)
            assert small.wait_idle() == 0
            assert sb.exec("echo still fine").stdout == "still fine\n"


def test_the_proxy_can_listen_on_a_unix_socket(tmp_path, docker_backend):
    path = tmp_path / "proxy.sock"
    with ProxyInThread(listen=f"unix://{path}") as on_socket:
        assert on_socket.address == f"unix://{path}"
        backend = DockerBackend(base_url=on_socket.address)
        with pytest.raises(docker.errors.APIError, match="refused POST /images/create"):
            backend.api.pull("busybox")
    assert not path.exists()


def test_the_cli_serves_the_proxy_until_sigterm(base_image):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from regrow.cli import app; app()",
            "sandbox",
            "proxy",
            "--listen",
            f"tcp://127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                backend = DockerBackend(base_url=f"tcp://127.0.0.1:{port}")
                break
            except Exception:
                assert process.poll() is None and time.monotonic() < deadline, (
                    process.stderr.read() if process.stderr else ""
                )
                time.sleep(0.2)
        assert backend.image_exists(base_image)
        with pytest.raises(docker.errors.APIError, match="refused POST /images/create"):
            backend.api.pull("busybox")
    finally:
        stop(process)
    assert process.returncode == 0
    assert "refused POST /images/create" in (process.stderr.read() if process.stderr else "")


def test_bench_proxy_prints_exec_figures_direct_and_through_the_proxy(base_image):
    from typer.testing import CliRunner

    from regrow.cli import app

    result = CliRunner().invoke(app, ["bench", "proxy", "--repetitions", "5"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    for key in ("exec_direct", "exec_proxied", "create_destroy_direct", "create_destroy_proxied"):
        assert 0 < figures[key]["p50_ms"] <= figures[key]["p95_ms"]
    assert figures["exec_overhead"] > 0 and isinstance(figures["target_met"], bool)
