"""The agent's action: one tool call, with the argument schema of every tool."""

from typing import Any

from openenv.core.env_server.types import Action
from pydantic import BaseModel, ConfigDict, Field


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadFileArgs(_Args):
    path: str = Field(description="File path; relative paths are under /workspace.")
    start_line: int | None = Field(default=None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(default=None, ge=1, description="Last line to show (inclusive).")


class WriteFileArgs(_Args):
    path: str = Field(description="File path; relative paths are under /workspace.")
    content: str = Field(description="The whole new content of the file.")


class EditFileArgs(_Args):
    path: str = Field(description="File path; relative paths are under /workspace.")
    old: str = Field(min_length=1, description="Exact text to replace; it must occur exactly once.")
    new: str = Field(description="Replacement text.")


class RunArgs(_Args):
    command: str = Field(min_length=1, description="Shell command, run in /workspace.")
    timeout: float | None = Field(default=None, gt=0, description="Seconds; capped by the server.")


class SearchArgs(_Args):
    pattern: str = Field(min_length=1, description="Regular expression (grep -E).")
    path: str | None = Field(default=None, description="File or directory to search; default /workspace.")


class ListDirArgs(_Args):
    path: str | None = Field(default=None, description="Directory; default /workspace.")


class SubmitArgs(_Args):
    pass


TOOL_ARGS: dict[str, type[BaseModel]] = {
    "read_file": ReadFileArgs,
    "write_file": WriteFileArgs,
    "edit_file": EditFileArgs,
    "run": RunArgs,
    "search": SearchArgs,
    "list_dir": ListDirArgs,
    "submit": SubmitArgs,
}

TOOL_DESCRIPTIONS: dict[str, str] = {
    "read_file": "Read a text file, optionally a range of lines.",
    "write_file": "Create or overwrite a file with the given content.",
    "edit_file": "Replace one exact occurrence of `old` with `new` in a file.",
    "run": "Run a shell command in /workspace and return its output and exit code.",
    "search": "Search files for a regular expression; returns matching lines with line numbers.",
    "list_dir": "List a directory.",
    "submit": "Finish the episode; your changes are graded by the task's tests.",
}


def tool_specs() -> list[dict[str, Any]]:
    """Each tool as {name, description, parameters}, the JSON Schema form MCP and OpenAI use."""
    return [
        {"name": name, "description": TOOL_DESCRIPTIONS[name], "parameters": args.model_json_schema()}
        for name, args in TOOL_ARGS.items()
    ]


class ToolCall(Action):
    """One action of the agent: call `tool` with `args`."""

    tool: str = Field(description="Tool name; see /schema or tools/list.")
    args: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments.")
