"""The Docker engine goes away or restarts under a live server: /health says so, episodes end with a clear error,
and the server recovers by itself once the engine answers.

These tests own a second dockerd (its own data root, exec root, pidfile, socket and config) that runs in its own
network namespace, so it can never touch the host's networking, and they stop and start it at will.
"""

import concurrent.futures
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from websockets.sync.client import connect

from env_server.lifecycle.runtime import SERVER_LABEL
from env_server.server import RunningServer, start_in_background
from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from proto.health import ENGINE_RESTARTED, ENGINE_UNREACHABLE, ENVIRONMENT_FAILURES, ServerHealth
from sandbox import DockerBackend
from sandbox.lifecycle.owner import MANAGED_LABEL, OWNER_LABEL
from tests.env_server.conftest import make_settings
from tests.task_fixture import DEMO_TASK_ID

pytestmark = pytest.mark.docker

# A loaded two-core CI machine starts a dockerd, or a container on it, in tens of seconds: poll with room to spare.
DEADLINE_S = 180.0
HOST_BRIDGE = Path("/sys/class/net/docker0")
PR_SET_PDEATHSIG = 1


def wait_for(
    what: str, condition: Callable[[], object], within_s: float = DEADLINE_S, seen: Callable[[], object] = lambda: ""
) -> float:
    """Poll `condition` until it is truthy; return the seconds it took, or fail naming `what` and what was `seen`."""
    started = time.monotonic()
    while True:
        try:
            if condition():
                return time.monotonic() - started
        except (httpx.HTTPError, OSError):
            pass
        if time.monotonic() - started > within_s:
            pytest.fail(f"{what}: not within {within_s:g} s {seen()}")
        time.sleep(0.25)


class SecondDockerd:
    """A dockerd of the test's own under `root`, started in a network namespace of its own."""

    def __init__(self, root: Path):
        self.root = root
        self.socket = root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.pidfile = root / "dockerd.pid"
        self.log = root / "dockerd.log"
        (root / "daemon.json").write_text("{}")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        # --bridge=none and no iptables: even inside its namespace the daemon makes no network of its own.
        command = [
            "unshare", "--net", "--fork", "--kill-child=SIGTERM", "--",
            "dockerd",
            "--config-file", str(self.root / "daemon.json"),
            "--data-root", str(self.root / "data"),
            "--exec-root", str(self.root / "exec"),
            "--pidfile", str(self.pidfile),
            "--host", self.url,
            "--storage-driver", self.storage_driver(),
            "--bridge", "none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
            )
        wait_for(f"the test dockerd answers on {self.url} (log: {self.log})", self.answers)

    @staticmethod
    def storage_driver() -> str:
        # The host's own driver when it needs no kernel overlay-on-overlay support; vfs works anywhere.
        host = subprocess.run(["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True).stdout
        return "fuse-overlayfs" if host.strip() == "fuse-overlayfs" and shutil.which("fuse-overlayfs") else "vfs"

    def answers(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise AssertionError(f"the test dockerd exited: {self.log.read_text()[-2000:]}")
        return self.cli("version", check=False).returncode == 0

    def cli(self, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["docker", "--host", self.url, *args], capture_output=True, text=True, check=check, timeout=120, **kwargs
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the daemon and wait until it and its namespace are gone."""
        if self.process is None:
            return
        try:
            os.kill(int(self.pidfile.read_text()), sig)
        except (OSError, ValueError):
            self.process.send_signal(sig)  # no pidfile yet: unshare passes SIGTERM on to the daemon
        try:
            self.process.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def remove_files(self) -> None:
        """Kill what is left of this daemon (containerd, shims: their command lines name our root), unmount, delete."""
        for pid in _pids_naming(str(self.root)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with open("/proc/mounts") as mounts:
            points = [line.split()[1] for line in mounts if line.split()[1].startswith(str(self.root))]
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def _die_with_parent() -> None:
    # If pytest itself is killed, unshare gets SIGTERM and passes it on to the daemon (--kill-child).
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _pids_naming(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def test_engine(docker_backend, demo_task_store) -> Iterator[SecondDockerd]:
    """A second dockerd holding the demo image; always stopped and deleted, and the host's bridge checked after."""
    if shutil.which("dockerd") is None or shutil.which("unshare") is None:
        pytest.fail("these tests need dockerd and unshare (util-linux) to run a second engine of their own")
    bridge_before = HOST_BRIDGE.exists()
    # A short path: a unix socket's path must fit in 108 bytes.
    engine = SecondDockerd(Path(tempfile.mkdtemp(prefix="rgd-", dir="/tmp")))
    try:
        engine.start()
        saved = subprocess.Popen(["docker", "save", _demo_image(demo_task_store)], stdout=subprocess.PIPE)
        engine.cli("load", stdin=saved.stdout)
        assert saved.wait(timeout=300) == 0
        yield engine
    finally:
        engine.stop()
        engine.remove_files()
        if bridge_before and not HOST_BRIDGE.exists():
            pytest.fail("the host's docker0 bridge is gone after the test dockerd ran: the host's networking was hit")


def _demo_image(store: Path) -> str:
    from env_server.task_store import TaskStore

    return next(iter(TaskStore(store).tasks.values())).record.image


def engine_containers(engine: SecondDockerd) -> list[dict]:
    backend = DockerBackend(base_url=engine.url)
    try:
        return backend.managed_containers()
    finally:
        backend.client.close()


@contextlib.contextmanager
def server_on(engine: SecondDockerd, store: Path, tmp_path: Path, **overrides) -> Iterator[RunningServer]:
    settings = make_settings(store, tmp_path, host="127.0.0.1", port=0, grpc_port=0, engine_check_s=1.0, **overrides)
    backend = DockerBackend(base_url=engine.url, wait_for_engine=True)
    with start_in_background(settings, backend) as running:
        yield running


def health(http: httpx.Client) -> tuple[int, ServerHealth]:
    reply = http.get("/health")
    return reply.status_code, ServerHealth.model_validate(reply.json())


def grpc_serving(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status


def reset_when_healthy(http: httpx.Client) -> str:
    """A new episode's id; a 503 while the server counts the engine away (a ping slower than 2 s on a loaded
    machine) is retried until the deadline."""
    started = time.monotonic()
    while True:
        reply = http.post("/reset", json={"task_id": DEMO_TASK_ID})
        if reply.status_code != 503 or time.monotonic() - started > DEADLINE_S:
            assert reply.status_code == 200, reply.text
            return reply.json()["metadata"]["episode_id"]
        time.sleep(0.5)


def step_works(step: dict) -> bool:
    """The step ran in a live sandbox and its episode goes on (the exec's output itself is other tests' concern)."""
    works = not step["done"] and "tool_error" not in step["metadata"] and step["observation"]["exit_code"] == 0
    assert works, (step["metadata"], step["observation"].get("feedback"), step["observation"].get("exit_code"))
    return True


def step_in_own_client(url: str, episode_id: str, command: str) -> dict:
    with httpx.Client(base_url=url, timeout=DEADLINE_S) as http:
        return run_step(http, episode_id, command)


def run_step(http: httpx.Client, episode_id: str, command: str = "echo hi") -> dict:
    reply = http.post("/step", json={"action": {"tool": "run", "args": {"command": command}}, "episode_id": episode_id})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_server_started_without_its_engine_says_unhealthy_then_recovers_and_reaps_the_orphan(
    test_engine, demo_task_store, tmp_path
):
    orphan = test_engine.cli(
        "create", "--label", f"{MANAGED_LABEL}=1", "--label", f"{OWNER_LABEL}={socket.gethostname()}:999999999:1",
        "--label", f"{SERVER_LABEL}=dead-server", "--network", "none", _demo_image(demo_task_store), "true",
    ).stdout.strip()  # fmt: skip
    test_engine.stop()
    with (
        server_on(test_engine, demo_task_store, tmp_path) as server,
        httpx.Client(base_url=server.http_url, timeout=60) as http,
    ):
        status, answer = health(http)
        assert status == 503 and answer.status == "unhealthy" and not answer.engine_up
        assert answer.reason is not None and answer.reason.startswith("engine unreachable: ")
        assert (answer.free_slots, answer.max_episodes) == (0, 4)
        assert grpc_serving(server.grpc_target) == health_pb2.HealthCheckResponse.NOT_SERVING
        metrics = http.get("/metrics").text
        assert "regrow_engine_up 0.0" in metrics and "regrow_free_episode_slots 0.0" in metrics
        assert "regrow_max_episodes 4.0" in metrics

        started = time.monotonic()
        refused = http.post("/reset", json={"task_id": DEMO_TASK_ID})
        assert (refused.status_code, refused.json()["code"]) == (503, ENGINE_UNREACHABLE)
        assert time.monotonic() - started < 10  # refused at once, not after an engine timeout
        with connect(server.http_url.replace("http://", "ws://") + "/ws") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"task_id": DEMO_TASK_ID}}))
            frame = json.loads(ws.recv(timeout=60))
        assert frame["type"] == "error" and frame["data"]["message"].startswith(f"{ENGINE_UNREACHABLE}: ")
        with grpc.insecure_channel(server.grpc_target) as channel, pytest.raises(grpc.RpcError) as refused_rpc:
            pb_grpc.CodingEnvStub(channel).Reset(pb.ResetRequest(task_id=DEMO_TASK_ID), timeout=60)
        assert refused_rpc.value.code() == grpc.StatusCode.UNAVAILABLE

        test_engine.start()
        recovery_s = wait_for("/health answers 200 after the engine started", lambda: health(http)[0] == 200)
        print(f"engine up -> /health 200 in {recovery_s:.1f} s")
        assert grpc_serving(server.grpc_target) == health_pb2.HealthCheckResponse.SERVING
        assert orphan not in {c["Id"] for c in engine_containers(test_engine)}
        assert server.runtime.wait_warm(DEADLINE_S)

        episode = reset_when_healthy(http)
        assert step_works(run_step(http, episode))
        http.delete(f"/episodes/{episode}")
    assert engine_containers(test_engine) == []


def test_episodes_in_flight_end_clearly_when_the_engine_goes_away_and_the_server_recovers_when_it_is_back(
    test_engine, demo_task_store, tmp_path
):
    with (
        server_on(test_engine, demo_task_store, tmp_path) as server,
        httpx.Client(base_url=server.http_url, timeout=120) as http,
    ):
        wait_for("/health answers 200", lambda: health(http)[0] == 200)
        episodes = [reset_when_healthy(http) for _ in range(3)]
        for episode in episodes:
            assert step_works(run_step(http, episode))

        with concurrent.futures.ThreadPoolExecutor(1) as running:
            in_flight = running.submit(step_in_own_client, server.http_url, episodes[0], "sleep 25")
            time.sleep(1.0)
            test_engine.stop()
            first = in_flight.result(timeout=DEADLINE_S)
        down_s = wait_for("/health answers 503 after the engine stopped", lambda: health(http)[0] == 503)
        print(f"engine stopped -> /health 503 in {down_s:.1f} s")
        # The step running when the engine stopped answered (no HTTP 500): its episode ended, or its command died.
        if not first["done"]:
            first = run_step(http, episodes[0])
        assert first["done"] and first["metadata"]["tool_error"] in ENVIRONMENT_FAILURES, first
        ended = run_step(http, episodes[1])
        assert ended["done"] and ended["metadata"]["tool_error"] == ENGINE_UNREACHABLE
        assert "engine" in ended["observation"]["feedback"]
        refused = http.post("/reset", json={"task_id": DEMO_TASK_ID})
        assert (refused.status_code, refused.json()["code"]) == (503, ENGINE_UNREACHABLE)

        engine_back = time.monotonic()
        test_engine.start()
        up_s = wait_for("/health answers 200 after the engine started", lambda: health(http)[0] == 200)
        print(f"engine up -> /health 200 in {up_s:.1f} s")
        # The third episode's sandbox was stopped by the restart: its next step says so, not an HTTP 500.
        ended = run_step(http, episodes[2])
        assert ended["done"] and ended["metadata"]["tool_error"] == ENGINE_RESTARTED

        episode = reset_when_healthy(http)
        assert step_works(run_step(http, episode))
        assert http.delete(f"/episodes/{episode}").status_code == 200

        def pool_holds_one_live_container_and_nothing_else() -> bool:
            containers = engine_containers(test_engine)
            return len(containers) == 1 and containers[0]["State"] == "running"

        refill_s = wait_for(
            "the stopped containers are gone and the pool holds one live container",
            pool_holds_one_live_container_and_nothing_else,
            seen=lambda: [(c["Id"][:12], c["State"], c["Status"]) for c in engine_containers(test_engine)],
        )
        print(f"engine up -> pool refilled, nothing stopped left in {time.monotonic() - engine_back:.1f} s")
        assert refill_s >= 0
        assert health(http)[1].free_slots == 4
    assert engine_containers(test_engine) == []
