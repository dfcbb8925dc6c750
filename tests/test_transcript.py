"""What the transcript gives the policy and its SDPO teacher: a call in the form the system prompt shows, and hints
that speak of the action alone (no engine, no model)."""

from proto.actions import ToolCall, tool_specs
from proto.health import SANDBOX_GONE
from proto.observations import CodingObservation
from proto.transcript import (
    STEP_BUDGET_USED,
    WALL_CLOCK_BUDGET_USED,
    format_tool_call,
    system_prompt,
    turn_feedback,
)


def test_a_call_reads_like_the_system_prompts_example_name_first():
    text = format_tool_call(ToolCall(tool="read_file", args={"path": "README.md"}))
    assert text in system_prompt(tool_specs())  # DPO's chosen text is text the prompt taught the policy to write
    assert text.index('"name"') < text.index('"arguments"')


def test_arguments_follow_the_tools_own_order_whatever_order_they_came_in():
    call = ToolCall(tool="edit_file", args={"new": "b", "path": "x.py", "old": "a"})
    assert format_tool_call(call) == (
        '<tool_call>\n{"name": "edit_file", "arguments": {"path": "x.py", "old": "a", "new": "b"}}\n</tool_call>'
    )
    unknown = ToolCall(tool="not_a_tool", args={"b": 1, "a": 2})  # an unknown tool keeps the order it came in
    assert '"arguments": {"b": 1, "a": 2}' in format_tool_call(unknown)


def _observation(feedback: str | None, **metadata) -> CodingObservation:
    return CodingObservation(feedback=feedback, metadata=metadata)


def test_a_hint_keeps_what_the_env_said_of_the_action_and_drops_the_budget_notices():
    last = _observation(f"SyntaxError: invalid syntax (line 3); {STEP_BUDGET_USED}")
    assert turn_feedback([last]) == "SyntaxError: invalid syntax (line 3)"
    assert turn_feedback([_observation(STEP_BUDGET_USED)]) is None
    assert turn_feedback([_observation(WALL_CLOCK_BUDGET_USED), _observation("no such file: a.py")]) == (
        "no such file: a.py"
    )


def test_a_step_the_environment_lost_gives_no_hint():
    lost = _observation("the sandbox died; this episode is over", tool_error=SANDBOX_GONE)
    assert turn_feedback([lost]) is None
    assert turn_feedback([lost, _observation("unknown tool 'x'", tool_error="UNKNOWN_TOOL")]) == "unknown tool 'x'"
