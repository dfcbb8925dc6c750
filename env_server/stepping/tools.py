"""The agent's tools, run against one episode's sandbox; each returns what the observation shows."""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from env_server.settings import ServerSettings
from proto.actions import EditFileArgs, ListDirArgs, ReadFileArgs, RunArgs, SearchArgs, WriteFileArgs
from proto.python_ast import parse_or_raise
from proto.tasks import HASH_SEED
from sandbox import FileTooLarge, Sandbox, SandboxFileNotFound
from sandbox.layout import WORKSPACE

# The agent's commands hash strings as the task's test runs did, so that its pytest sees the same ids and orders. They
# write no bytecode and no pytest cache into the workspace, whose directories the effect check below reads.
RUN_ENV = {"PYTHONHASHSEED": str(HASH_SEED), "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_ADDOPTS": "-p no:cacheprovider"}
# Whether a command changed the workspace (a file added, removed, written or chmod-ed; .git and caches aside) is
# recorded with its step: a prefix reset replays file writes only, so a prefix whose commands changed files is refused.
# One find after the command, and no fork before it: anything whose status changed since the stamp was truncated,
# where a file added or removed changes its directory's (before: two listings, sorted and summed, eleven processes).
# File times move in clock ticks (4 ms here), and `-cnewer` is strict: a write in the stamp's own tick (`echo x > f`
# right after it) read as no change. So the command starts only once a file written after the stamp is newer.
EFFECT_MARK = "regrow-workspace-effect:"
EFFECT_STAMP = "/tmp/.regrow-run-stamp"
# Bounds the wait for the next tick (builtins only, microseconds an iteration); past it the effect stays unknown.
TICK_POLLS = 100000
_CHANGED_SINCE = (
    f"find {WORKSPACE} \\( -path {WORKSPACE}/.git -o -name __pycache__ -o -name .pytest_cache \\) -prune -o "
    '-cnewer "$s" -print -quit'
)
TRACKED_RUN = (
    f's={EFFECT_STAMP}; t={EFFECT_STAMP}.tick; : > "$s"; i=0; '
    f'while : > "$t" && ! [ "$t" -nt "$s" ] && [ $i -lt {TICK_POLLS} ]; do i=$((i + 1)); done; '
    'sh -c "$1"; code=$?; effect=unknown; '
    # A find that cannot run its test (a stamp the command removed, no fork left, no tick) leaves the effect unknown.
    f'if [ "$t" -nt "$s" ] && newer=$({_CHANGED_SINCE} 2>/dev/null); then '
    'if [ -z "$newer" ]; then effect=unchanged; else effect=changed; fi; fi; '
    f"printf '\\n{EFFECT_MARK}%s\\n' \"$effect\" >&2; exit $code"
)


@dataclass
class ToolResult:
    """What one tool call produced; `error` names the kind of failure for metadata and metrics."""

    output: str = ""
    exit_code: int | None = None
    truncated: bool = False
    feedback: str | None = None
    error: str | None = None
    workspace_changed: bool | None = None  # a command's effect on the workspace files; None when not known


def split_effect(stderr: str) -> tuple[str, bool | None]:
    """(the command's own stderr, whether it changed the workspace) from a TRACKED_RUN's stderr."""
    at = stderr.rfind("\n" + EFFECT_MARK)
    if at < 0:
        return stderr, None
    effect = stderr[at + 1 + len(EFFECT_MARK) :].strip()
    return stderr[:at], {"changed": True, "unchanged": False}.get(effect)


class ToolRejected(Exception):
    """A tool call that cannot run as asked; the message is the agent's feedback."""

    def __init__(self, feedback: str, error: str = "VALIDATION_ERROR"):
        super().__init__(feedback)
        self.feedback, self.error = feedback, error


def workspace_path(path: str) -> str:
    """`path` as an absolute, normalised path inside /workspace; rejects anything outside it."""
    if not path or "\0" in path:
        raise ToolRejected("path must be a non-empty string without NUL bytes")
    absolute = posixpath.normpath(posixpath.join(WORKSPACE, path))
    if absolute != WORKSPACE and not absolute.startswith(WORKSPACE + "/"):
        raise ToolRejected(f"path {path!r} is outside {WORKSPACE}; use a path relative to {WORKSPACE}", "PATH_OUTSIDE")
    return absolute


def resolved_path(sb: Sandbox, path: str) -> str:
    """The real path of `path` in the sandbox, which must stay in /workspace even through symlinks."""
    absolute = workspace_path(path)
    # The engine's file API acts as root, so a symlink must never lead it out of the workspace.
    result = sb.exec(["realpath", "-m", "--", absolute], timeout=10)
    real = result.stdout.strip()
    if result.exit_code != 0 or not (real == WORKSPACE or real.startswith(WORKSPACE + "/")):
        raise ToolRejected(f"path {path!r} leads outside /workspace through a symlink", "PATH_OUTSIDE")
    return real


def _relative(path: str) -> str:
    return posixpath.relpath(path, WORKSPACE)


def _parse_feedback(path: str, text: str) -> str | None:
    """A one-line hint when a Python file no longer parses, else None."""
    if not path.endswith(".py"):
        return None
    try:
        parse_or_raise(text)
    except SyntaxError as error:
        return f"{_relative(path)} no longer parses: line {error.lineno}: {error.msg}"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"{_relative(path)} no longer parses: {type(error).__name__}"
    return None


def _encoded(text: str, what: str, limit: int) -> bytes:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolRejected(f"{what} is not valid UTF-8 text (it holds a lone surrogate); send valid text") from None
    if len(data) > limit:
        raise ToolRejected(
            f"{what} is {len(data)} bytes, over the {limit}-byte write limit; write smaller files", "TOO_LARGE"
        )
    return data


def _read_text(sb: Sandbox, path: str) -> str:
    try:
        data = sb.read_file(path)
    except SandboxFileNotFound:
        raise ToolRejected(f"no such file: {_relative(path)}; list_dir shows what exists", "NOT_FOUND") from None
    except IsADirectoryError:
        raise ToolRejected(f"{_relative(path)} is a directory; use list_dir", "NOT_A_FILE") from None
    except FileTooLarge as error:
        raise ToolRejected(str(error), "TOO_LARGE") from None
    return data.decode("utf-8", errors="replace")


def _capped(text: str, cap: int) -> tuple[str, bool]:
    return (text[:cap], True) if len(text) > cap else (text, False)


def read_file(sb: Sandbox, args: ReadFileArgs, settings: ServerSettings) -> ToolResult:
    text = _read_text(sb, resolved_path(sb, args.path))
    if args.start_line or args.end_line:
        lines = text.splitlines(keepends=True)
        start = (args.start_line or 1) - 1
        text = "".join(lines[start : args.end_line])
    output, truncated = _capped(text, settings.read_cap_chars)
    return ToolResult(output=output, truncated=truncated)


def _write(sb: Sandbox, path: str, text: str, settings: ServerSettings) -> ToolResult:
    data = _encoded(text, "content", settings.max_write_bytes)
    try:
        sb.write_file(path, data)
    except FileTooLarge as error:
        raise ToolRejected(str(error), "TOO_LARGE") from None
    feedback = _parse_feedback(path, text)
    return ToolResult(
        output=f"wrote {len(data)} bytes to {_relative(path)}", feedback=feedback, error="SYNTAX" if feedback else None
    )


def write_file(sb: Sandbox, args: WriteFileArgs, settings: ServerSettings) -> ToolResult:
    _encoded(args.content, "content", settings.max_write_bytes)  # refuse before touching the sandbox
    return _write(sb, resolved_path(sb, args.path), args.content, settings)


def edit_file(sb: Sandbox, args: EditFileArgs, settings: ServerSettings) -> ToolResult:
    path = resolved_path(sb, args.path)
    text = _read_text(sb, path)
    count = text.count(args.old)
    if count == 0:
        raise ToolRejected(
            f"edit text not found in {_relative(path)}; read_file it and copy the exact text", "EDIT_NOT_FOUND"
        )
    if count > 1:
        raise ToolRejected(
            f"edit text occurs {count} times in {_relative(path)}; include more context to make it unique",
            "EDIT_AMBIGUOUS",
        )
    return _write(sb, path, text.replace(args.old, args.new, 1), settings)


def run(sb: Sandbox, args: RunArgs, settings: ServerSettings, tracked: bool = False) -> ToolResult:
    """The agent's command in the workspace; `tracked` also records whether it changed the workspace's files."""
    timeout = args.timeout if args.timeout is not None else settings.run_timeout_default_s
    if timeout > settings.run_timeout_cap_s:
        raise ToolRejected(
            f"timeout {timeout:g}s is over the server cap of {settings.run_timeout_cap_s:g}s; ask for less"
        )
    # the check costs a stamp, a wait for the clock's next tick and a find: about 7 ms a step, paid only when asked
    argv = ["sh", "-c", TRACKED_RUN, "sh", args.command] if tracked else ["sh", "-c", args.command]
    result = sb.exec(argv, timeout=timeout, cwd=WORKSPACE, env=RUN_ENV)
    stderr, changed = split_effect(result.stderr) if tracked else (result.stderr, None)
    output = result.stdout + stderr
    feedback = error = None
    if result.timed_out:
        feedback, error = (
            f"command timed out after {timeout:g}s and was killed; make it faster or raise timeout",
            "TIMEOUT",
        )
    elif result.oom_killed:
        feedback, error = "command ran out of memory and was killed", "OOM"
    elif result.reclaimed:
        feedback, error = (
            f"the sandbox's process limit was full: {result.reclaimed} processes that earlier commands left running "
            "were killed before this command ran; files are kept",
            "PIDS_RECLAIMED",
        )
    return ToolResult(
        output=output,
        exit_code=result.exit_code,
        truncated=result.truncated,
        feedback=feedback,
        error=error,
        workspace_changed=changed,
    )


def search(sb: Sandbox, args: SearchArgs, settings: ServerSettings) -> ToolResult:
    path = resolved_path(sb, args.path or ".")
    result = sb.search(args.pattern, path)
    if result.exit_code == 1:
        return ToolResult(output="no matches", exit_code=1)
    if result.exit_code != 0:
        return ToolResult(
            output=result.stderr,
            exit_code=result.exit_code,
            feedback=f"search failed: {result.stderr.strip()[:200]}",
            error="SEARCH",
        )
    output, truncated = _capped(result.stdout.replace(WORKSPACE + "/", ""), settings.read_cap_chars)
    return ToolResult(output=output, exit_code=0, truncated=truncated or result.truncated)


def list_dir(sb: Sandbox, args: ListDirArgs, settings: ServerSettings) -> ToolResult:
    path = resolved_path(sb, args.path or ".")
    try:
        entries = sb.list_dir(path)
    except SandboxFileNotFound:
        raise ToolRejected(f"no such directory: {_relative(path)}", "NOT_FOUND") from None
    except NotADirectoryError:
        raise ToolRejected(f"{_relative(path)} is a file; use read_file", "NOT_A_DIRECTORY") from None
    lines = [entry.name + ("/" if entry.kind == "dir" else "") for entry in entries]
    output, truncated = _capped("\n".join(lines), settings.read_cap_chars)
    return ToolResult(output=output, truncated=truncated)


# The implementation of every tool that is not terminal, keyed by the argument model proto declares it with.
IMPLEMENTATIONS: dict[type[BaseModel], Callable[[Sandbox, Any, ServerSettings], ToolResult]] = {
    ReadFileArgs: read_file,
    WriteFileArgs: write_file,
    EditFileArgs: edit_file,
    RunArgs: run,
    SearchArgs: search,
    ListDirArgs: list_dir,
}


def call_tool(sb: Sandbox, args: BaseModel, settings: ServerSettings, track_effects: bool = False) -> ToolResult:
    """Run the tool whose validated arguments `args` are (not a terminal one); a rejected call becomes feedback.
    With `track_effects`, a command's result says whether it changed the workspace's files."""
    try:
        if track_effects and isinstance(args, RunArgs):
            return run(sb, args, settings, tracked=True)
        return IMPLEMENTATIONS[type(args)](sb, args, settings)
    except ToolRejected as rejected:
        return ToolResult(output="", feedback=rejected.feedback, error=rejected.error)
