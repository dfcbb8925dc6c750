"""Every test run of a task hashes strings with one seed, and the task record says which."""

from env_server.grading_run import GRADING_ENV
from proto.tasks import HASH_SEED, TaskRecord
from sandbox.docker_backend import ExecResult
from task_synth.suite_runs import PLUGIN_DIR, run_tests


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
    assert [env.get("PYTHONHASHSEED") for env in sb.envs[1::2]] == [str(HASH_SEED), str(HASH_SEED), "1"]
    assert sb.envs[3]["PYTHONPATH"] == f"{PLUGIN_DIR}:/plugins"  # the report plugin's folder, then the caller's


def test_the_record_carries_the_seed_the_grader_uses():
    assert TaskRecord.model_fields["hash_seed"].default == HASH_SEED
    assert GRADING_ENV["PYTHONHASHSEED"] == str(HASH_SEED)
