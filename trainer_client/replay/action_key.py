"""Canonical form of an action, so that two spellings of the same tool call compare equal."""

import json
import posixpath
from typing import Any

from pydantic import ValidationError

from proto.actions import TOOL_ARGS, ToolCall
from proto.transcript import WORKSPACE

_PATH_ARGS = ("path",)


def canonical_path(path: str | None) -> str:
    """A workspace path relative to /workspace ("." for the root); other absolute paths stay absolute."""
    if path is None or not path.strip():
        return "."
    normal = posixpath.normpath(path.strip())
    if normal == WORKSPACE:
        return "."
    if normal.startswith(WORKSPACE + "/"):
        return normal[len(WORKSPACE) + 1 :]
    return normal


def canonical_args(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the tool's schema reads them, with defaults dropped and paths canonical."""
    schema = TOOL_ARGS.get(tool)
    if schema is None:
        return args
    try:
        parsed = schema.model_validate(args).model_dump(exclude_none=True)
    except ValidationError:
        return args  # an invalid call is compared by its raw arguments
    for name in _PATH_ARGS:
        if name in schema.model_fields:
            parsed[name] = canonical_path(parsed.get(name))
    if tool == "run":
        parsed["command"] = parsed["command"].strip()  # inner spaces may be quoted, so they stay
    return parsed


def action_key(call: ToolCall) -> str:
    """One string per distinct action: the tool name plus its canonical arguments as sorted JSON."""
    return json.dumps({"tool": call.tool, "args": canonical_args(call.tool, call.args)}, sort_keys=True)
