"""`regrow synth` SIGTERMed while it scans the repository image beside the editable install removes its containers at
once, on the real engine: the scan's container (labelled regrow.synth=repo, from the image) outlived the stop until
the scan ended, and for good when the run was killed after a grace period."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.lifecycle.owner import OWNER_LABEL
from task_synth.repository.repo_image import SYNTH_LABEL

pytestmark = pytest.mark.docker

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
# A stop may take this long to remove the run's containers (`docker stop` grants 10 s before its SIGKILL).
GONE_WITHIN_S = 5.0


def _synth_containers(docker_backend, pid: int) -> list[dict]:
    """The containers of synthesis run `pid`: its sandboxes, and any container of the repository image it made."""
    owned = [c for c in docker_backend.managed_containers() if f":{pid}:" in c["Labels"].get(OWNER_LABEL, "")]
    return [c for c in owned if SYNTH_LABEL in c["Labels"]]


def _labelled(docker_backend, pid: int, value: str) -> bool:
    return any(c["Labels"][SYNTH_LABEL] == value for c in _synth_containers(docker_backend, pid))


def _left_after(docker_backend, pid: int, seconds: float) -> list[dict]:
    """The run's containers still there `seconds` after now, or none as soon as they are gone."""
    deadline = time.monotonic() + seconds
    while (left := _synth_containers(docker_backend, pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_sigterm_during_the_image_scan_leaves_no_container_within_seconds(docker_backend, base_image, tmp_path):
    log_path = tmp_path / "synth.log"
    command = [sys.executable, "-m", "regrow", "synth", str(MINILIB), "--out", str(tmp_path / "out"), "--max-tasks=1"]
    with open(log_path, "w") as log:  # a file: a pipe nobody reads would block the run's logging
        process = subprocess.Popen(command, stdout=log, stderr=log)
    left: list[dict] = []
    try:
        deadline = time.monotonic() + 600
        while not _labelled(docker_backend, process.pid, "install"):  # the image scan runs beside the install
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        left = _left_after(docker_backend, process.pid, GONE_WITHIN_S)
        process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
        for container in _synth_containers(docker_backend, process.pid):  # a failing run leaks nothing into the next
            docker_backend.remove(container["Id"])
    assert left == [], [(c["Names"], c["Labels"][SYNTH_LABEL], c["State"]) for c in left]
    assert process.returncode == 130, log_path.read_text()
