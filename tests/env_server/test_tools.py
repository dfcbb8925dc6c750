"""The tools, their feedback when a step goes wrong, and the per-episode step and wall-clock budgets.

The tools run on the in-memory sandbox (its contract with the Docker one is tests/sandbox/test_sandbox_contract.py);
the budgets grade, so they run on the engine."""

import time

import pytest

from env_server.lifecycle.reset_options import ResetOptions
from proto.actions import ToolCall
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS


@pytest.fixture
def episode(memory_runtime):
    live = memory_runtime.start_episode(ResetOptions(task_id=DEMO_TASK_ID))
    yield live
    memory_runtime.abort(live, "test over")


def act(runtime, episode, tool, **args):
    return runtime.take_step(episode, ToolCall(tool=tool, args=args))


def test_read_file_shows_a_line_range(memory_runtime, episode):
    runtime = memory_runtime
    observation = act(runtime, episode, "read_file", path="calc/ops.py", start_line=4, end_line=5)
    assert observation.output == "def add(a, b):\n    return a + b\n"


def test_edit_file_fails_clearly_when_text_is_missing_or_ambiguous(memory_runtime, episode):
    runtime = memory_runtime
    missing = act(runtime, episode, "edit_file", path="calc/ops.py", old="def divide(", new="x")
    assert missing.feedback.startswith("edit text not found in calc/ops.py")
    ambiguous = act(runtime, episode, "edit_file", path="calc/ops.py", old="return a", new="return b")
    assert "occurs 3 times" in ambiguous.feedback
    assert "return a + b" in act(runtime, episode, "read_file", path="calc/ops.py").output


def test_a_python_file_that_no_longer_parses_gets_the_line(memory_runtime, episode):
    runtime = memory_runtime
    observation = act(runtime, episode, "write_file", path="calc/ops.py", content="def add(a, b):\n    return (a +\n")
    assert observation.feedback.startswith("calc/ops.py no longer parses: line 2")
    assert observation.metadata["tool_error"] == "SYNTAX"


def test_run_reports_exit_code_and_a_timeout_as_feedback(memory_runtime, episode):
    runtime = memory_runtime
    failed = act(runtime, episode, "run", command="echo out; echo err >&2; exit 3")
    assert failed.exit_code == 3 and failed.output == "out\nerr\n" and failed.feedback is None
    slow = act(runtime, episode, "run", command="sleep 30", timeout=1)
    assert slow.feedback.startswith("command timed out after 1s") and slow.metadata["tool_error"] == "TIMEOUT"
    assert act(runtime, episode, "run", command="pwd").output == "/workspace\n"


def test_search_finds_lines_and_says_when_nothing_matches(memory_runtime, episode):
    runtime = memory_runtime
    found = act(runtime, episode, "search", pattern="def (add|sub)")
    assert "calc/ops.py:4:def add(a, b):" in found.output
    assert act(runtime, episode, "search", pattern="no_such_name_anywhere").output == "no matches"
    assert act(runtime, episode, "search", pattern="(unclosed").feedback.startswith("search failed")


def test_list_dir_marks_directories(memory_runtime, episode):
    runtime = memory_runtime
    assert act(runtime, episode, "list_dir").output.splitlines()[:3] == [".git/", "calc/", "tests/"]


def test_the_step_budget_grades_the_workspace_when_used_up(memory_runtime, monkeypatch):
    runtime = memory_runtime
    monkeypatch.setattr(runtime.settings, "step_budget", 2)
    episode = runtime.start_episode(ResetOptions(task_id=DEMO_TASK_ID))
    assert not act(runtime, episode, "write_file", path="calc/ops.py", content=ORIGINAL_OPS).done
    final = act(runtime, episode, "run", command="true")
    assert final.done and final.reward == 1.0 and "step budget used up" in final.feedback
    assert runtime.traces.get_episode(episode.id).status == "budget_exhausted"


def test_the_wall_clock_budget_grades_the_workspace_at_the_next_step(memory_runtime, monkeypatch):
    runtime = memory_runtime
    monkeypatch.setattr(runtime.settings, "wall_clock_budget_s", 1.0)
    episode = runtime.start_episode(ResetOptions(task_id=DEMO_TASK_ID))
    time.sleep(1.2)
    final = act(runtime, episode, "run", command="echo never")
    assert final.done and "wall-clock budget ran out" in final.feedback and "never" not in final.output
    assert runtime.traces.get_episode(episode.id).status == "budget_exhausted"


class _ReclaimedSandbox:
    """A sandbox whose exec reports what the Docker one reports after its entry reclaimed a spent pids limit."""

    def exec(self, command, timeout=30.0, cwd=None, env=None, user=None):
        from sandbox import ExecResult

        return ExecResult(0, "ALIVE\n", "", False, False, 0.1, reclaimed=62)


def test_a_run_after_left_over_processes_filled_the_pids_limit_says_they_were_killed():
    from env_server.settings import ServerSettings
    from env_server.stepping.tools import run
    from proto.actions import RunArgs

    result = run(_ReclaimedSandbox(), RunArgs(command="echo ALIVE"), ServerSettings())
    assert result.output == "ALIVE\n" and result.exit_code == 0
    assert result.error == "PIDS_RECLAIMED"
    assert result.feedback.startswith("the sandbox's process limit was full: 62 processes")
