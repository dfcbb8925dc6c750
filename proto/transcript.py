"""The one transcript of an episode: the text the policy sees, from the system prompt to each tool response.

The trainer renders live episodes with it, trace replay rebuilds the student's context with it, and every dataset
export writes it, so an export shows exactly what the policy saw. Feedback (the env's hint when a step went wrong)
is never in it: the SDPO teacher gets it separately, and exports keep it in a field of its own.
Tool calls use the Qwen/Hermes form `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; every message is a
plain system/user/assistant message, so any chat template renders it.
"""

from __future__ import annotations

import json
from typing import Any

from proto.actions import TOOL_ARGS, ToolCall
from proto.health import ENVIRONMENT_FAILURES
from proto.observations import CodingObservation
from proto.traces import EpisodeTrace, StepTrace

# Where the task's repository lives in every sandbox (the sandbox layout says the same; a test holds them together).
WORKSPACE = "/workspace"

# Keys of an action's metadata that let a trace be turned back into the policy's turns.
TURN_KEY = "turn"  # the index of the model turn that made the call; calls of one turn share it
ASSISTANT_TEXT_KEY = "assistant_text"  # the turn's raw text, on its first call
PARSE_ERROR_KEY = "parse_error"  # why the policy's text was not a well-formed call

# What the env adds to a step's feedback when the episode's budget ends it: about the episode, not the action.
STEP_BUDGET_USED = "step budget used up; graded as is"
WALL_CLOCK_BUDGET_USED = "the wall-clock budget ran out before this step; the workspace was graded as it was"
BUDGET_NOTICES = (STEP_BUDGET_USED, WALL_CLOCK_BUDGET_USED)

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

SYSTEM_INTRO = (
    f"You are a software engineer. The repository is in {WORKSPACE}. Fix the task by calling tools; "
    "call submit when you are done.\n\nTools:\n"
)
SYSTEM_OUTRO = (
    "\n\nTo call a tool, write its name and arguments as JSON inside <tool_call></tool_call> tags, for example:\n"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "README.md"}}\n</tool_call>'
)


def system_prompt(tools: list[dict[str, Any]]) -> str:
    """The system message: the job, one line per tool, and the call format with an example."""
    return SYSTEM_INTRO + "\n".join(_tool_line(tool) for tool in tools) + SYSTEM_OUTRO


def _tool_line(tool: dict[str, Any]) -> str:
    """`- name(arg, optional?): description` from a tool's JSON-Schema spec."""
    schema = tool.get("parameters") or {}
    required = set(schema.get("required", []))
    args = ", ".join(name if name in required else f"{name}?" for name in schema.get("properties", {}))
    return f"- {tool['name']}({args}): {tool.get('description', '')}"


def initial_messages(problem_statement: str, tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The messages before the first turn: the system prompt and the task."""
    return [
        {"role": "system", "content": system_prompt(tools)},
        {"role": "user", "content": problem_statement},
    ]


def prefix_history(origin: EpisodeTrace, steps: int) -> list[dict[str, Any]]:
    """The first `steps` steps of `origin` as a prefix reset shows them (`metadata["prefix"]["history"]`, and the
    export of the prefixed episode): each step's call and what it answered."""
    shown = []
    for step in sorted(origin.steps, key=lambda step: step.index)[:steps]:
        observation = step.observation
        entry: dict[str, Any] = {"tool": step.action.tool, "args": step.action.args, "output": observation.output}
        for name in ("exit_code", "feedback"):
            if getattr(observation, name) is not None:
                entry[name] = getattr(observation, name)
        shown.append(entry)
    return shown


def prefix_messages(prefix: dict[str, Any] | None) -> list[dict[str, str]]:
    """The recorded steps a prefix reset's episode starts after (its reset's `metadata["prefix"]`), as the turns the
    policy took and the env's answers: one assistant message and one tool response a step. They come before the
    first generation prompt, so a trainer keeps them out of the loss as prompt."""
    messages: list[dict[str, str]] = []
    for entry in (prefix or {}).get("history", []):
        call = ToolCall(tool=entry["tool"], args=entry.get("args") or {})
        answer = CodingObservation(output=entry.get("output") or "", exit_code=entry.get("exit_code"))
        messages += [{"role": "assistant", "content": format_tool_call(call)}, tool_response_message([answer])]
    return messages


def format_tool_call(call: ToolCall) -> str:
    """The canonical assistant text for one call (used when the raw text was not recorded), in the form the system
    prompt's example shows: `name` before `arguments`, and the arguments in the order the tool lists them. A policy
    writes calls that way, so a DPO pair in any other order would be text the policy never writes."""
    fields = list(TOOL_ARGS[call.tool].model_fields) if call.tool in TOOL_ARGS else []
    listed = {key: call.args[key] for key in fields if key in call.args}
    arguments = {**listed, **{key: value for key, value in call.args.items() if key not in listed}}
    payload = json.dumps({"name": call.tool, "arguments": arguments})
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def observation_text(observation: CodingObservation) -> str:
    """What the policy sees of one step's result: output, exit code, truncation (never the feedback)."""
    parts = [observation.output.rstrip("\n")] if observation.output else []
    if observation.exit_code is not None:
        parts.append(f"[exit code: {observation.exit_code}]")
    if observation.truncated:
        parts.append("[output truncated]")
    if observation.done:
        parts.append("[episode finished]")
    return "\n".join(parts) if parts else "[no output]"


def tool_response_message(observations: list[CodingObservation]) -> dict[str, str]:
    """One user message holding the responses to all calls of one turn, in order."""
    blocks = [f"<tool_response>\n{observation_text(obs)}\n</tool_response>" for obs in observations]
    return {"role": "user", "content": "\n".join(blocks)}


def turn_feedback(observations: list[CodingObservation]) -> str | None:
    """The env's feedback on one turn's calls, joined; None when no call drew feedback on the action itself.

    What the env says of the episode's budget or of its own failures (a lost sandbox) is no hint on how to act better,
    so SDPO's teacher never sees it."""
    hints = [hint for hint in map(action_feedback, observations) if hint]
    return "\n".join(hints) if hints else None


def action_feedback(observation: CodingObservation) -> str | None:
    """One step's feedback on the action, without the budget notices; None for a step the environment failed."""
    if observation.metadata.get("tool_error") in ENVIRONMENT_FAILURES:
        return None
    text = observation.feedback or ""
    for notice in BUDGET_NOTICES:
        text = text.replace(notice, "")
    return text.strip().strip(";").strip() or None


def turns(steps: list[StepTrace]) -> list[list[StepTrace]]:
    """The recorded steps grouped by the model turn that made them; a step without a turn mark is a turn alone."""
    grouped: list[list[StepTrace]] = []
    for step in sorted(steps, key=lambda s: s.index):
        turn = step.action.metadata.get(TURN_KEY)
        if grouped and turn is not None and grouped[-1][0].action.metadata.get(TURN_KEY) == turn:
            grouped[-1].append(step)
        else:
            grouped.append([step])
    return grouped


def assistant_text(turn: list[StepTrace]) -> str:
    """What the policy wrote for one turn: its raw text where recorded, else the canonical calls."""
    text = turn[0].action.metadata.get(ASSISTANT_TEXT_KEY)
    return text if isinstance(text, str) else "\n".join(format_tool_call(step.action) for step in turn)


def transcript(trace: EpisodeTrace, before_step: int | None = None) -> list[dict[str, str]]:
    """The policy's messages for a recorded episode; with `before_step`, the context it had when it produced that step
    (a step in the middle of a turn had the context of that turn's start)."""
    messages = initial_messages(trace.problem_statement, trace.tools)
    for turn in turns(trace.steps):
        if before_step is not None and turn[-1].index >= before_step:
            break
        messages.append({"role": "assistant", "content": assistant_text(turn)})
        messages.append(tool_response_message([step.observation for step in turn]))
    return messages
