"""How an episode becomes chat messages: the tool prompt, tool calls, tool responses and hints.

The agent loop renders the live episode with these functions, and trace replay rebuilds the
exact context the student saw from a recorded `proto.EpisodeTrace` with `messages_from_trace`.
Tool calls use the Qwen/Hermes form `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
everything is plain system/user/assistant messages so that any chat template renders it.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

from proto import CodingObservation, EpisodeTrace, ToolCall

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_CODE_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)

# Keys an action's metadata carries so that a trace can be turned back into the student's turns.
TURN_KEY = "turn"
ASSISTANT_TEXT_KEY = "assistant_text"
PARSE_ERROR_KEY = "parse_error"

SYSTEM_INTRO = (
    "You are a software engineer. The repository is in /workspace. Fix the task by calling tools; "
    "call submit when you are done.\n\nTools:\n"
)
SYSTEM_OUTRO = (
    "\n\nTo call a tool, write its name and arguments as JSON inside <tool_call></tool_call> tags, for example:\n"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "README.md"}}\n</tool_call>'
)
HINT_PREFIX = "Feedback on the action you take next: "  # the teacher re-reads the attempt the feedback is about


@dataclass(frozen=True)
class ParsedToolCall:
    """One tool call read from the policy's text; `error` says why it is malformed, if it is."""

    call: ToolCall
    error: str | None = None


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


def format_tool_call(call: ToolCall) -> str:
    """The canonical assistant text for one call (used when the raw text was not recorded)."""
    payload = json.dumps({"name": call.tool, "arguments": call.args}, sort_keys=True)
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def format_observation(observation: CodingObservation) -> str:
    """What the policy sees of one step's result: output, exit code, truncation (never the hint)."""
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
    blocks = [f"<tool_response>\n{format_observation(obs)}\n</tool_response>" for obs in observations]
    return {"role": "user", "content": "\n".join(blocks)}


def hint_message(feedback: str) -> dict[str, str]:
    """The message SDPO's teacher sees before a turn: the env's feedback on that same turn."""
    return {"role": "user", "content": HINT_PREFIX + feedback}


def turn_feedback(observations: list[CodingObservation]) -> str | None:
    """The env's feedback on one turn's calls, joined; None when no call drew feedback."""
    hints = [obs.feedback for obs in observations if obs.feedback]
    return "\n".join(hints) if hints else None


def parse_tool_calls(text: str) -> list[ParsedToolCall]:
    """Every tool call in a turn's text; a turn with none yields one malformed call, never nothing.

    Without `<tool_call>` tags, a JSON `{"name", "arguments"}` object (or a list of them), bare or
    in a code fence, is read as those calls: small policies often drop the tags.
    """
    blocks = _TOOL_CALL_BLOCK.findall(text)
    if blocks:
        return [_parse_block(block) for block in blocks]
    untagged = _untagged_calls(text)
    return untagged or [_malformed("", {}, "no <tool_call> block in the reply")]


def _untagged_calls(text: str) -> list[ParsedToolCall]:
    for candidate in [*_CODE_FENCE.findall(text), text]:
        try:
            payload = json.loads(candidate.strip())
        except json.JSONDecodeError:
            continue
        items = payload if isinstance(payload, list) else [payload]
        if items and all(isinstance(item, dict) and isinstance(item.get("name"), str) for item in items):
            return [_parse_block(json.dumps(item)) for item in items]
    return []


def _parse_block(block: str) -> ParsedToolCall:
    try:
        payload = json.loads(block.strip())
    except json.JSONDecodeError as error:
        return _malformed("", {}, f"tool call is not valid JSON: {error.msg} at char {error.pos}")
    if not isinstance(payload, dict):
        return _malformed("", {}, "tool call JSON must be an object with `name` and `arguments`")
    name = payload.get("name")
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):  # some policies emit the arguments JSON-encoded
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    tool = name if isinstance(name, str) else ""
    if not isinstance(arguments, dict):
        return _malformed(tool, {}, "`arguments` must be a JSON object")
    if not tool:
        return _malformed("", arguments, "tool call has no string `name`")
    return ParsedToolCall(ToolCall(tool=tool, args=arguments))


def _malformed(tool: str, args: dict[str, Any], error: str) -> ParsedToolCall:
    return ParsedToolCall(ToolCall(tool=tool, args=args, metadata={PARSE_ERROR_KEY: error}), error)


def messages_from_trace(trace: EpisodeTrace, before_step: int | None = None) -> list[dict[str, str]]:
    """The student's messages from a recorded episode: the context it had when it produced `before_step`.

    Steps sent from one turn share `metadata["turn"]`; the first carries the turn's raw text in
    `metadata["assistant_text"]`. Steps without that metadata are rendered one turn each, canonically.
    A step in the middle of a turn had the context of that turn's start.
    """
    turns: list[list] = []
    for step in trace.steps:
        turn = step.action.metadata.get(TURN_KEY)
        if turns and turn is not None and turns[-1][0].action.metadata.get(TURN_KEY) == turn:
            turns[-1].append(step)
        else:
            turns.append([step])
    messages = initial_messages(trace.problem_statement, trace.tools)
    for turn_steps in turns:
        if before_step is not None and turn_steps[-1].index >= before_step:
            break
        text = turn_steps[0].action.metadata.get(ASSISTANT_TEXT_KEY)
        if text is None:
            text = "\n".join(format_tool_call(s.action) for s in turn_steps)
        messages.append({"role": "assistant", "content": text})
        messages.append(tool_response_message([s.observation for s in turn_steps]))
    return messages
