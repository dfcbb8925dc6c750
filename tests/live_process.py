"""Servers the tests start as real subprocesses: a free loopback port, and waiting until /health answers."""

import socket
import subprocess
import time

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
