"""Reading the policy's turns and writing the SDPO hint; the transcript itself is `proto.transcript`.

Small policies often drop the `<tool_call>` tags, so a bare or fenced JSON call is read as one too.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

from proto import ToolCall
from proto.transcript import PARSE_ERROR_KEY

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_CODE_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)

HINT_PREFIX = "Feedback on the action you take next: "  # the teacher re-reads the attempt the feedback is about


@dataclass(frozen=True)
class ParsedToolCall:
    """One tool call read from the policy's text; `error` says why it is malformed, if it is."""

    call: ToolCall
    error: str | None = None


def hint_message(feedback: str) -> dict[str, str]:
    """The message SDPO's teacher sees before a turn: the env's feedback on that same turn."""
    return {"role": "user", "content": HINT_PREFIX + feedback}


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
