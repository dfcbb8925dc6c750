"""Servers the tests start as real subprocesses or threads: a free loopback port, waiting until /health answers,
stopping."""

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Return once GET {url}/health is 200; raise if the process exits or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode} before {url} was healthy")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url}/health did not answer within {timeout_s:g} s")


def stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM, so the server cleans up its sandboxes; SIGKILL if it has not exited after `grace_s`."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def served_subprocess(command: list[str], log_path: Path, env: dict, timeout_s: float, grace_s: float) -> Iterator[str]:
    """Start a server subprocess on a free port appended as `--port`, log to `log_path`; yield its URL once healthy."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen([*command, "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            try:
                wait_healthy(url, process, timeout_s=timeout_s)
            except RuntimeError as error:
                raise RuntimeError(f"{error}: {log_path.read_text()[-3000:]}") from None
            yield url
        finally:
            stop(process, grace_s=grace_s)


@contextlib.contextmanager
def served_in_thread(app, what: str, **config) -> Iterator[str]:
    """Run an ASGI app under uvicorn in a daemon thread on a free loopback port; yield its http:// URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start within 20 s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
