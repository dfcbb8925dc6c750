"""The agent's action: one tool call, and the registry of tools: each declared once, as its argument model.

A model's docstring is the tool's description; `terminal` marks the tool that ends the episode. The OpenEnv
schema, the MCP tools, the server's dispatch and the TRL environment class are all derived from TOOL_ARGS.
"""

import inspect
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from proto.openenv_types import Action


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    terminal: ClassVar[bool] = False  # the call ends the episode and the workspace is graded


class ReadFileArgs(_Args):
    """Read a text file, optionally a range of lines."""

    path: str = Field(description="File path; relative paths are under /workspace.")
    start_line: int | None = Field(default=None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(default=None, ge=1, description="Last line to show (inclusive).")


class WriteFileArgs(_Args):
    """Create or overwrite a file with the given content."""

    path: str = Field(description="File path; relative paths are under /workspace.")
    content: str = Field(description="The whole new content of the file.")


class EditFileArgs(_Args):
    """Replace one exact occurrence of `old` with `new` in a file."""

    path: str = Field(description="File path; relative paths are under /workspace.")
    old: str = Field(min_length=1, description="Exact text to replace; it must occur exactly once.")
    new: str = Field(description="Replacement text.")


class RunArgs(_Args):
    """Run a shell command in /workspace and return its output and exit code; setsid what must outlive it."""

    command: str = Field(min_length=1, description="Shell command, run in /workspace.")
    timeout: float | None = Field(default=None, gt=0, description="Seconds; capped by the server.")


class SearchArgs(_Args):
    """Search files for a regular expression; returns matching lines with line numbers."""

    pattern: str = Field(min_length=1, description="Regular expression (grep -E).")
    path: str | None = Field(default=None, description="File or directory to search; default /workspace.")


class ListDirArgs(_Args):
    """List a directory."""

    path: str | None = Field(default=None, description="Directory; default /workspace.")


class SubmitArgs(_Args):
    """Finish the episode; your changes are graded by the task's tests."""

    terminal: ClassVar[bool] = True


TOOL_ARGS: dict[str, type[_Args]] = {
    "read_file": ReadFileArgs,
    "write_file": WriteFileArgs,
    "edit_file": EditFileArgs,
    "run": RunArgs,
    "search": SearchArgs,
    "list_dir": ListDirArgs,
    "submit": SubmitArgs,
}


def tool_description(name: str) -> str:
    return inspect.cleandoc(TOOL_ARGS[name].__doc__ or "")


def tool_specs() -> list[dict[str, Any]]:
    """Each tool as {name, description, parameters}, the JSON Schema form MCP and OpenAI use."""
    return [
        {"name": name, "description": tool_description(name), "parameters": args.model_json_schema()}
        for name, args in TOOL_ARGS.items()
    ]


class ToolCall(Action):
    """One action of the agent: call `tool` with `args`."""

    tool: str = Field(description="Tool name; see /schema or tools/list.")
    args: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments.")
