"""`regrow synth` stopped with SIGTERM removes its sandboxes and keeps the tasks it finished, on the real engine."""

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from proto.task_files import RECORDS, read_records
from sandbox.lifecycle.owner import OWNER_LABEL

pytestmark = pytest.mark.docker

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"


def _containers_of(docker_backend, pid: int) -> list[dict]:
    containers = docker_backend.managed_containers()
    return [c for c in containers if f":{pid}:" in (c.get("Labels") or {}).get(OWNER_LABEL, "")]


def _sigterm_once(command: list[str], log_path: Path, ready: Callable[[subprocess.Popen], bool]) -> subprocess.Popen:
    """Start `command`, send it SIGTERM once `ready` says so, and wait for it to end (killed if it will not)."""
    with open(log_path, "w") as log:  # a file: a pipe nobody reads would block the run's logging
        process = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 600
        while not ready(process):
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return process


def test_sigterm_stops_synthesis_and_leaves_no_container(docker_backend, base_image, tmp_path):
    command = [sys.executable, "-m", "regrow", "synth", str(MINILIB), "--out", str(tmp_path / "out")]
    sandbox_up = lambda started: bool(_containers_of(docker_backend, started.pid))  # noqa: E731
    process = _sigterm_once([*command, "--max-tasks", "2"], tmp_path / "synth.log", sandbox_up)
    left = _containers_of(docker_backend, process.pid)
    for container in left:  # gone either way: a failing run leaks nothing into the next test
        docker_backend.remove(container["Id"])
    assert left == [], [c["Names"] for c in left]
    assert process.returncode != 0


def test_sigterm_stops_the_synthesis_benchmark_and_leaves_no_container(docker_backend, base_image, tmp_path):
    """`regrow bench synth` killed by a scheduler left its validation sandboxes running (a corpus run showed it)."""
    command = [sys.executable, "-m", "regrow", "bench", "synth", str(MINILIB), "--max-tasks", "4", "--json"]
    sandbox_up = lambda started: bool(_containers_of(docker_backend, started.pid))  # noqa: E731
    process = _sigterm_once(command, tmp_path / "bench.log", sandbox_up)
    left = _containers_of(docker_backend, process.pid)
    for container in left:
        docker_backend.remove(container["Id"])
    assert left == [], [c["Names"] for c in left]
    assert "stopped:" in (tmp_path / "bench.log").read_text()


def test_a_stopped_run_keeps_its_tasks_and_image_and_a_rerun_goes_on_from_there(docker_backend, base_image, tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "regrow", "synth", str(MINILIB), "--out", str(out), "--modes", "stub"]
    kept_one = lambda _: (out / RECORDS).exists() and bool((out / RECORDS).read_text().strip())  # noqa: E731
    process = _sigterm_once([*command, "--max-tasks", "20"], tmp_path / "first.log", kept_one)
    said = (tmp_path / "first.log").read_text()
    kept = read_records(out)
    assert process.returncode == 130, said
    assert f"stopped: {len(kept)} new task(s) kept in" in " ".join(said.split()), said
    assert _containers_of(docker_backend, process.pid) == []
    assert docker_backend.image_exists(kept[0].image)  # the kept tasks run on it
    assert "candidates " in (out / "synth.log").read_text()  # the progress, in the log file too

    again = subprocess.run([*command, "--max-tasks", str(len(kept) + 1)], capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    ids = [record.instance_id for record in read_records(out)]
    assert len(ids) == len(set(ids)) == len(kept) + 1 and ids[: len(kept)] == [r.instance_id for r in kept]
    assert "judged by an earlier run" in again.stdout + again.stderr


def test_a_stop_landing_between_a_sandboxs_creation_and_its_start_leaves_it_not(base_image, tmp_path):
    """CI saw SIGTERM leave a 'created' install sandbox: the signal landed where no cleanup of that sandbox ran yet.
    The stop sweeps the run's sandboxes by label, wherever the signal landed."""
    from sandbox import DockerBackend
    from task_synth.pipeline import SynthStopped, synthesize
    from task_synth.repository.repo_image import SYNTH_LABEL
    from task_synth.settings import SynthSettings

    backend = DockerBackend()
    real_create = backend._create_container

    def created_then_stopped(image, labels, **options):
        container_id = real_create(image, labels, **options)
        if labels.get(SYNTH_LABEL) == "install":
            raise KeyboardInterrupt  # as the SIGTERM handler raises it, before the caller's start and cleanup
        return container_id

    backend._create_container = created_then_stopped  # type: ignore[method-assign]
    with pytest.raises(SynthStopped):
        synthesize(str(MINILIB), tmp_path / "out", SynthSettings(max_tasks=1), backend)
    owned = backend.containers_labelled({OWNER_LABEL: backend.owner})
    assert [c for c in owned if SYNTH_LABEL in (c.get("Labels") or {})] == []
