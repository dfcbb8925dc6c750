"""`regrow synth` stopped with SIGTERM removes the sandboxes it made, on the real engine."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.lifecycle.owner import OWNER_LABEL

pytestmark = pytest.mark.docker

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"


def _containers_of(docker_backend, pid: int) -> list[dict]:
    containers = docker_backend.managed_containers()
    return [c for c in containers if f":{pid}:" in (c.get("Labels") or {}).get(OWNER_LABEL, "")]


def test_sigterm_stops_synthesis_and_leaves_no_container(docker_backend, base_image, tmp_path):
    command = [sys.executable, "-m", "regrow", "synth", str(MINILIB), "--out", str(tmp_path / "out")]
    with open(tmp_path / "synth.log", "w") as log:  # a file: a pipe nobody reads would block the run's logging
        process = subprocess.Popen([*command, "--max-tasks", "2"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 600
        while not _containers_of(docker_backend, process.pid):  # a sandbox of the run is up
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "synth.log").read_text()
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    left = _containers_of(docker_backend, process.pid)
    for container in left:  # gone either way: a failing run leaks nothing into the next test
        docker_backend.remove(container["Id"])
    assert left == [], [c["Names"] for c in left]
    assert process.returncode != 0
