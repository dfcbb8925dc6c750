"""A reset from a warm pool: the task's rest streams into a tar already waiting in the container and the first step's
command goes to a process already started; the workspace is still exactly the task's, as a cold sandbox seeded with
the task's whole archive holds it, and the first step answers as any step does."""

import logging

import pytest

from env_server.lifecycle.provisioning import seed
from env_server.lifecycle.reset_options import ResetOptions
from proto.actions import ToolCall
from sandbox.layout import WORKSPACE

pytestmark = pytest.mark.docker

# Names, kinds, modes, owners, sizes, link targets and file digests (times: a folder's is when a child was written).
_TREE = (
    f"cd {WORKSPACE} && find . -path ./.pytest_cache -prune -o -printf '%p %y %m %U %G %s %l\\n' | sort"
    " && find . -type f ! -path './.pytest_cache/*' -exec sha256sum {} + | sort"
)


def test_a_pooled_reset_holds_exactly_the_tasks_workspace_and_its_first_step_runs(docker_backend, runtime, caplog):
    caplog.set_level(logging.INFO, logger="sandbox")
    for task in sorted(runtime.store.tasks.values(), key=lambda t: t.id):
        assert runtime.wait_warm(120)
        episode = runtime.start_episode(ResetOptions(task_id=task.id))
        try:
            first = runtime.take_step(episode, ToolCall(tool="run", args={"command": "echo first; exit 4"}))
            pooled = episode.sandbox_ready().exec(["sh", "-c", _TREE]).stdout
        finally:
            runtime.abort(episode, "test over")
        assert (first.exit_code, first.output.strip()) == (4, "first"), first
        with seed(task, docker_backend.create(task.record.image)) as cold:
            assert pooled == cold.exec(["sh", "-c", _TREE]).stdout, task.id
    assert "primed import" not in caplog.text and "starts plainly" not in caplog.text
