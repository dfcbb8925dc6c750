"""The task's original .py files, rebuilt from the workspace and the solution patch, so that the scan excuses what
the original module itself does (read whole, not from the patch's added lines cut into fragments)."""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from unidiff import Hunk, PatchedFile, PatchSet
from unidiff.constants import DEV_NULL, LINE_TYPE_NO_NEWLINE
from unidiff.errors import UnidiffParseError

logger = logging.getLogger(__name__)


class PatchDoesNotApply(ValueError):
    """One file's part of a solution patch does not rebuild its original from the workspace; the message says why."""


@dataclass(frozen=True)
class OriginalFiles:
    """The original text of each .py file the solution patch rebuilt, and the patch text of those it could not."""

    texts: dict[str, str] = field(default_factory=dict)
    unapplied: str = ""  # its added lines still excuse, read as fragments, as before the originals were rebuilt


def original_files(solution_patch: str, workspace: Mapping[str, bytes]) -> OriginalFiles:
    """Each .py file the patch touches, as the original repository had it: its workspace bytes with the patch
    applied. A part that does not apply is logged and left in `unapplied`."""
    try:
        patched_files = PatchSet(solution_patch)
    except UnidiffParseError as error:
        logger.warning("the solution patch does not parse (%s): the scan excuses its added lines only", error)
        return OriginalFiles(unapplied=solution_patch)
    texts, unapplied = {}, []
    for patched in patched_files:
        if not patched.path.endswith(".py") or patched.is_removed_file:
            continue  # the scan reads .py files only, and a file the original lacks excuses nothing
        try:
            texts[patched.path] = original_text(patched, workspace.get(patched.path))
        except PatchDoesNotApply as error:
            logger.warning("%s: %s; the scan excuses its added lines only", patched.path, error)
            unapplied.append(str(patched))
    return OriginalFiles(texts, "".join(unapplied))


def original_text(patched: PatchedFile, workspace_bytes: bytes | None) -> str:
    """The file's original text: its workspace text with every hunk applied exactly where the patch says."""
    old = _workspace_text(patched, workspace_bytes)
    lines, rebuilt, position = _git_lines(old), [], 0
    for hunk in patched:
        before, after = _sides(hunk)
        start = (
            hunk.source_start - 1 if hunk.source_length else hunk.source_start
        )  # an empty side names the line before
        if start < position or lines[start : start + len(before)] != before:
            raise PatchDoesNotApply(
                f"its hunk at line {hunk.source_start} does not match the workspace's text there: "
                "was the task's workspace built from another state than its solution patch?"
            )
        rebuilt += lines[position:start] + after
        position = start + len(before)
    return "".join(rebuilt + lines[position:])


def _workspace_text(patched: PatchedFile, workspace_bytes: bytes | None) -> str:
    if patched.is_binary_file or patched.is_rename:
        raise PatchDoesNotApply("a binary or renamed file is not rebuilt")
    if patched.source_file == DEV_NULL:
        if workspace_bytes is not None:
            raise PatchDoesNotApply("the patch creates the file, but the workspace already has it")
        return ""
    if workspace_bytes is None:
        raise PatchDoesNotApply("the workspace has no such file to apply the patch to")
    try:
        return workspace_bytes.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PatchDoesNotApply(f"the workspace's file is not UTF-8 text ({error})") from None


def _sides(hunk: Hunk) -> tuple[list[str], list[str]]:
    """The hunk's old and new lines; git's no-newline marker takes the newline off the line just before it."""
    old: list[str] = []
    new: list[str] = []
    last = ""
    for line in hunk:
        if line.line_type == LINE_TYPE_NO_NEWLINE:
            if last in ("-", " ") and old:
                old[-1] = old[-1].removesuffix("\n")
            if last in ("+", " ") and new:
                new[-1] = new[-1].removesuffix("\n")
            continue
        last = line.line_type
        if line.is_context or line.is_removed:
            old.append(line.value)
        if line.is_context or line.is_added:
            new.append(line.value)
    return old, new


def _git_lines(text: str) -> list[str]:
    return io.StringIO(text, newline="\n").readlines()  # split at \n only, as git does: \r and \f stay in the line
