"""Two small recorded episodes as `regrow traces export` writes them, for replay tests without a server."""

from datetime import UTC, datetime, timedelta

from proto.actions import ToolCall, tool_specs
from proto.observations import CodingObservation
from proto.traces import EpisodeTrace, StepTrace

START = datetime(2026, 1, 1, tzinfo=UTC)
PROBLEM = "Fix the failing test in mathlib. The function add should return the sum of its arguments."


def _step(
    index: int, action: ToolCall, output: str, exit_code: int | None = 0, feedback: str | None = None
) -> StepTrace:
    return StepTrace(
        index=index,
        action=action,
        observation=CodingObservation(output=output, exit_code=exit_code, feedback=feedback),
        started_at=START + timedelta(seconds=index),
        duration_s=0.1,
    )


def recorded_traces() -> list[EpisodeTrace]:
    """Episode 1 submits without reading anything; episode 2 runs the tests, then makes a bad edit."""
    first = EpisodeTrace(
        episode_id="ep-1",
        task_id="mathlib-add",
        problem_statement=PROBLEM,
        tools=tool_specs(),
        steps=[
            _step(0, ToolCall(tool="list_dir", args={}), "mathlib\ntests\n"),
            _step(1, ToolCall(tool="submit", args={}), "submitted", exit_code=None),
        ],
        status="submitted",
        reward=0.0,
        started_at=START,
        ended_at=START + timedelta(seconds=2),
    )
    second = EpisodeTrace(
        episode_id="ep-2",
        task_id="mathlib-add",
        problem_statement=PROBLEM,
        tools=tool_specs(),
        steps=[
            _step(
                0,
                ToolCall(tool="run", args={"command": "python -m pytest -q"}),
                "FAILED tests/test_core.py::test_add",
                1,
            ),
            _step(
                1,
                ToolCall(tool="edit_file", args={"path": "mathlib/core.py", "old": "return 1", "new": "return a + b"}),
                "",
                exit_code=None,
                feedback="edit_file: `old` text not found in mathlib/core.py",
            ),
            _step(2, ToolCall(tool="read_file", args={"path": "mathlib/core.py"}), "def add(a, b):\n    return 0\n"),
        ],
        status="budget_exhausted",
        reward=0.0,
        started_at=START,
        ended_at=START + timedelta(seconds=3),
    )
    return [first, second]
