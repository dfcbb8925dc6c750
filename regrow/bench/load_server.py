"""The server a load run drives: started by the bench when no URL is given, and what the bench reads from it (its
process's memory and open files, its twins counters, its containers)."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sandbox import DockerBackend
from sandbox.lifecycle.owner import OWNER_LABEL

log = logging.getLogger(__name__)

SERVER_START_S = 180.0
SERVER_STOP_S = 120.0


@dataclass
class LoadedServer:
    """The server under load, and the owner label of its containers when the bench started it."""

    url: str
    owner_prefix: str | None = None
    containers_left: int | None = None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        time.sleep(0.5)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"`regrow serve` did not come up at {url} within {SERVER_START_S:.0f} s; its log ends:\n{tail}")


@contextlib.contextmanager
def own_server(tasks: Path, slots: int, scratch: Path, backend: DockerBackend | None) -> Iterator[LoadedServer]:
    """`regrow serve` on free loopback ports, stopped with SIGTERM afterwards; its leftover containers are counted."""
    port = _free_port()
    command = [sys.executable, "-m", "regrow", "serve", "--tasks", str(tasks), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--grpc-port", str(_free_port()), "--max-episodes", str(slots)]
    command += ["--traces", str(scratch / "traces.sqlite")]
    log_path = scratch / "server.log"
    with log_path.open("wb") as server_log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=server_log, stderr=subprocess.STDOUT)
    server = LoadedServer(f"http://127.0.0.1:{port}", owner_prefix=f"{socket.gethostname()}:{process.pid}:")
    try:
        _wait_healthy(server.url, process, log_path)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)  # the server destroys its containers on the way out
        try:
            process.wait(SERVER_STOP_S)
        except subprocess.TimeoutExpired:
            log.warning("`regrow serve` did not stop within %.0f s of SIGTERM; killing it", SERVER_STOP_S)
            process.kill()
            process.wait()
        if backend is not None:
            server.containers_left = count_left(backend, server.owner_prefix)


def server_containers(backend: DockerBackend, owner_prefix: str | None) -> list[dict[str, Any]]:
    containers = backend.managed_containers()
    if owner_prefix is None:
        return containers
    return [c for c in containers if (c.get("Labels") or {}).get(OWNER_LABEL, "").startswith(owner_prefix)]


def count_left(backend: DockerBackend, owner_prefix: str | None) -> int:
    """The stopped server's containers, once removals already under way have had time to finish; then removed."""
    deadline = time.monotonic() + 30
    while (left := server_containers(backend, owner_prefix)) and time.monotonic() < deadline:
        time.sleep(1)
    if left:
        log.warning("%d container(s) outlived the server; removing them: %s", len(left), [c["Id"][:12] for c in left])
        for container in left:
            backend.remove(container["Id"])
    return len(left)


def process_metrics(url: str) -> tuple[float | None, float | None]:
    """The server's resident memory in bytes and its open file descriptors, from its /metrics."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=30).text
    except httpx.HTTPError as error:
        log.warning("could not read %s/metrics: %s", url, error)
        return None, None
    values = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith("process_"))
    rss, fds = values.get("process_resident_memory_bytes"), values.get("process_open_fds")
    return (float(rss) if rss else None, float(fds) if fds else None)


def twin_counts(url: str) -> dict[str, float]:
    """Impossible twins the server graded, by outcome (held, forged), from its /metrics; empty when it graded none."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=30).text
    except httpx.HTTPError:
        return {}
    prefix = 'regrow_twins_graded_total{outcome="'
    return {
        line[len(prefix) :].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }
