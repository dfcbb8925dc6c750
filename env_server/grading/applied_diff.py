"""A diff as grading/diff.py writes it, applied back to the task's tree: the change set it shows, where the diff is
whole. `regrow traces regrade` rebuilds an old episode's submission from its recorded diff with it. (The scan
rebuilds the original files from the task's git-format solution patch in grading/scan/originals.py.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from env_server.grading.change_set import ChangeSet, Tree
from env_server.grading.diff import NO_NEWLINE, NOT_KEPT

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_MODE_ONLY = "@@ the text is unchanged; the executable bit is "
# U+FFFD in added text may be a byte that was not UTF-8, which the diff replaced: its bytes are lost.
_REPLACED = "\ufffd"


class NotReplayable(Exception):
    """The diff cannot be applied exactly; the message says why."""


@dataclass
class FilePatch:
    """One file's part of a recorded diff: deleted, replaced by whole `text`, or changed by hunks."""

    path: str
    deleted: bool = False
    text: str | None = None  # the new text, where the task's version was not kept
    hunks: list[Hunk] = field(default_factory=list)
    executable: bool | None = None  # said only when nothing but the executable bit changed


@dataclass
class Hunk:
    """Lines of the old file from `start` (0-based) and what replaces them."""

    start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


def diff_problem(diff: str) -> str | None:
    """Why the recorded diff does not hold the whole change set (cut, a binary file, a file too large to diff), or
    None. Every line of a file's text starts with a marker, so these lines cannot be text."""
    for line in _split(diff):
        if line.startswith("... diff cut at "):
            return f"its recorded diff was cut at its size cap ({line.strip()})"
        if line.startswith("Binary files "):
            return f"its recorded diff leaves out a binary file ({line.strip()})"
        if line.startswith("@@ ") and "too many to diff here" in line:
            return f"its recorded diff leaves out a file too large to diff ({line.strip()})"
        if line.startswith("@@ ") and "not valid UTF-8" in line:
            return "its recorded diff cannot show a file's bytes that are not UTF-8"
    return None


def parse_diff(diff: str) -> list[FilePatch]:
    """The file patches of a diff written by grading/diff.py; NotReplayable where it is incomplete."""
    problem = diff_problem(diff)
    if problem:
        raise NotReplayable(problem)
    lines, patches, index = _split(diff), [], 0
    while index < len(lines):
        patch, index = _file_patch(lines, index)
        patches.append(patch)
    return patches


def change_set_from_diff(diff: str, pristine: Tree) -> ChangeSet:
    """The change set a recorded diff shows, applied to the task's tree (which must keep the changed files' bytes)."""
    changes = ChangeSet()
    for patch in parse_diff(diff):
        if patch.deleted:
            changes.deleted.append(patch.path)
            continue
        changes.written[patch.path] = _new_bytes(patch, pristine.data.get(patch.path))
        # The diff shows an executable bit only when nothing else changed; else the file keeps the task's bit.
        entry = pristine.entries.get(patch.path)
        executable = patch.executable if patch.executable is not None else entry is not None and entry.executable
        if executable:
            changes.executable.add(patch.path)
    return changes


def _file_patch(lines: list[str], index: int) -> tuple[FilePatch, int]:
    before, after = lines[index], lines[index + 1] if index + 1 < len(lines) else ""
    if not before.startswith("--- ") or not after.startswith("+++ "):
        raise NotReplayable(f"line {index + 1} of its recorded diff is not a file's header: {before.strip()[:80]!r}")
    old_name, new_name = before[4:].rstrip("\n"), after[4:].rstrip("\n")
    patch = FilePatch(new_name[2:] if new_name != "/dev/null" else old_name[2:], deleted=new_name == "/dev/null")
    index += 2
    marker = lines[index] if index < len(lines) else ""
    if marker.startswith("deleted, "):
        return patch, index + 1
    if marker == NOT_KEPT:
        added, index = _added_text(lines, index + 1)
        patch.text = "".join(added)
        return patch, index
    if marker.startswith(_MODE_ONLY):
        patch.executable = marker[len(_MODE_ONLY) :].startswith("set")
        return patch, index + 1
    while index < len(lines) and (found := _HUNK.match(lines[index])):
        hunk, index = _hunk(lines, index + 1, found)
        patch.hunks.append(hunk)
    return patch, index


def _added_text(lines: list[str], index: int) -> tuple[list[str], int]:
    """A whole new text: its `+` lines, with git's marker after a last line that has no newline."""
    added: list[str] = []
    while index < len(lines) and lines[index][:1] in ("+", "\\"):
        if lines[index] == NO_NEWLINE and added:
            added[-1] = added[-1].removesuffix("\n")
        elif lines[index] != NO_NEWLINE:
            added.append(_unreplaced(lines[index][1:]))
        index += 1
    return added, index


def _hunk(lines: list[str], index: int, header: re.Match[str]) -> tuple[Hunk, int]:
    old_left = int(header[2]) if header[2] is not None else 1
    new_left = int(header[4]) if header[4] is not None else 1
    hunk = Hunk(int(header[1]) - (1 if old_left else 0))  # a hunk that removes nothing names the line before it
    last = ""  # the marker of the line read last, which git's no-newline line refers to
    while index < len(lines) and (old_left > 0 or new_left > 0 or lines[index] == NO_NEWLINE):
        line = lines[index]
        if line == NO_NEWLINE:
            _drop_newline(hunk, last)
        else:
            last, text = line[:1], line[1:]
            if last not in (" ", "-", "+"):
                raise NotReplayable(f"line {index + 1} of its recorded diff is not a hunk's: {line.strip()[:80]!r}")
            if last in (" ", "-"):
                hunk.old.append(text)
                old_left -= 1
            if last in (" ", "+"):
                hunk.new.append(_unreplaced(text) if last == "+" else text)
                new_left -= 1
        index += 1
    if old_left != 0 or new_left != 0:
        raise NotReplayable("its recorded diff ends inside a hunk")
    return hunk, index


def _drop_newline(hunk: Hunk, last: str) -> None:
    if last in (" ", "-") and hunk.old:
        hunk.old[-1] = hunk.old[-1].removesuffix("\n")
    if last in (" ", "+") and hunk.new:
        hunk.new[-1] = hunk.new[-1].removesuffix("\n")


def _new_bytes(patch: FilePatch, old: bytes | None) -> bytes:
    """The file's new bytes: its whole new text, its old bytes (a new executable bit), or its old text patched."""
    if patch.text is not None:
        return patch.text.encode("utf-8")
    if patch.executable is not None:
        if old is None:
            raise NotReplayable(f"the task's {patch.path} is not at hand to set its executable bit on")
        return old
    try:
        old_lines = _split(old.decode("utf-8")) if old is not None else []
    except UnicodeDecodeError:
        raise NotReplayable(f"{patch.path} is not UTF-8 text in the task, so its diff cannot restore it") from None
    new_lines, position = [], 0
    for hunk in patch.hunks:
        if hunk.start < position or old_lines[hunk.start : hunk.start + len(hunk.old)] != hunk.old:
            raise NotReplayable(f"its recorded diff does not apply to the task's {patch.path}")
        new_lines += old_lines[position : hunk.start] + hunk.new
        position = hunk.start + len(hunk.old)
    return "".join(new_lines + old_lines[position:]).encode("utf-8")


def _unreplaced(text: str) -> str:
    """Added text, unless it holds U+FFFD: the diff may have put it for bytes that are not UTF-8, which are lost."""
    if _REPLACED in text:
        raise NotReplayable("its recorded diff adds text with U+FFFD, which may stand for bytes that are not UTF-8")
    return text


def _split(text: str) -> list[str]:
    """Lines as git (and grading/diff.py) split them: at \\n only."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
