"""Every test run of a task hashes strings with one seed, and the task record says which."""

import os
import subprocess
import sys

from env_server.grading.pytest_command import GRADING_ENV
from proto.tasks import HASH_SEED, TaskRecord
from sandbox import ExecResult
from task_synth.validation.suite_runs import PLUGIN_DIR, TEST_ENV, run_tests


class RecordingSandbox:
    """Just enough of a Sandbox to see what run_tests asks for."""

    def __init__(self):
        self.envs = []

    def exec(self, command, timeout=30.0, cwd=None, env=None, user=None):
        self.envs.append(env or {})
        return ExecResult(exit_code=1, stdout="", stderr="", timed_out=False, truncated=False, duration_s=0.0)

    def write_file(self, path, data):
        pass

    def read_file(self, path):
        raise FileNotFoundError(path)


def test_test_runs_use_the_recorded_seed_unless_told_otherwise():
    sb = RecordingSandbox()
    run_tests(sb, "python -m pytest", None, timeout=60)
    run_tests(sb, "python -m pytest", ["tests/test_a.py::test_b"], timeout=60, env={"PYTHONPATH": "/plugins"})
    run_tests(sb, "python -m pytest", None, timeout=60, env={"PYTHONHASHSEED": "1"})  # io_recording's determinism probe
    assert [env.get("PYTHONHASHSEED") for env in sb.envs] == [str(HASH_SEED), str(HASH_SEED), "1"]  # one exec a run
    assert sb.envs[1]["PYTHONPATH"] == f"{PLUGIN_DIR}:/plugins"  # the report plugin's folder, then the caller's


def test_the_record_carries_the_seed_the_grader_uses():
    assert TaskRecord.model_fields["hash_seed"].default == HASH_SEED
    assert GRADING_ENV["PYTHONHASHSEED"] == str(HASH_SEED)


# Ids built from a set's repr, as a suite does with `ids=repr` or an f-string over a set: they change with the seed.
SEED_DEPENDENT_SUITE = (
    "import pytest\n\n\n"
    "@pytest.mark.parametrize('tags', [{'alpha', 'beta', 'gamma', 'delta', 'epsilon'}], ids=repr)\n"
    "def test_tags(tags):\n"
    "    assert len(tags) == 5\n"
)


def _collected_ids(root, seed: str) -> list[str]:
    # plugins aside: the ids are pytest's own, and each start-up without them is 0.3 s instead of 0.6
    env = {**os.environ, **TEST_ENV, "PYTHONHASHSEED": seed, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "test_tags.py"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("test_tags.py::")]


def test_ids_that_change_with_the_hash_seed_are_the_same_in_every_run_of_a_task(tmp_path):
    (tmp_path / "test_tags.py").write_text(SEED_DEPENDENT_SUITE)
    # Unpinned, the ids differ between seeds: the case that made a real project fail its baseline.
    assert len({tuple(_collected_ids(tmp_path, str(seed))) for seed in range(1, 5)}) > 1
    pinned = TEST_ENV["PYTHONHASHSEED"]
    assert _collected_ids(tmp_path, pinned) == _collected_ids(tmp_path, pinned) == _collected_ids(tmp_path, pinned)
