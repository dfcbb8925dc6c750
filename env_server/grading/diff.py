"""The graded change set as a unified diff against the task's workspace, for people reading an episode.

Only the bytes the pristine tree keeps (Python sources and pytest configs) can be diffed; other files say so in a
line of their own instead of being left out, and a diff over the cap ends with a line naming what it does not show.
"""

from __future__ import annotations

import difflib

from env_server.grading.change_set import ChangeSet, Tree

NOT_KEPT = "@@ the task's version of this file is not kept; its new text follows @@\n"
NO_NEWLINE = "\\ No newline at end of file\n"
# difflib is quadratic on large files with many repeated lines (150 000 lines: 10 s); a grading must not wait on it.
MAX_DIFF_LINES = 40_000


def submission_diff(pristine: Tree, changes: ChangeSet, cap_chars: int = 256 * 1024) -> str:
    """The diff of every written and deleted path, sorted; cut at a file boundary past `cap_chars`, saying so."""
    paths = sorted({*changes.written, *changes.deleted})
    shown: list[str] = []
    size = 0
    for index, path in enumerate(paths):
        text = _file_diff(pristine, changes, path)
        if size + len(text) > cap_chars:
            if shown:
                return "".join(shown) + _closing(cap_chars, paths[index:])
            # The first file alone is over the cap: its start rather than nothing.
            return _cut(text, cap_chars) + _closing(cap_chars, paths[index + 1 :])
        shown.append(text)
        size += len(text)
    return "".join(shown)


def _file_diff(pristine: Tree, changes: ChangeSet, path: str) -> str:
    entry = pristine.entries.get(path)
    old = pristine.data.get(path)
    new = changes.written.get(path)
    before = f"a/{path}" if entry is not None else "/dev/null"
    after = f"b/{path}" if new is not None else "/dev/null"
    headers = f"--- {before}\n+++ {after}\n"
    if b"\0" in (old or b"") or b"\0" in (new or b""):
        return f"Binary files {before} and {after} differ\n"
    if entry is not None and old is None:  # the pristine tree keeps only sources and configs
        if new is None:
            what = f"{entry.size} bytes" if entry.kind == "file" else f"a {entry.kind}"
            return f"{headers}deleted, {what}\n"
        return headers + NOT_KEPT + "".join(_marked("+" + line) for line in _lines(new))
    if old == new:  # same bytes yet written: only the executable bit changed, which a text diff cannot show
        state = "set" if path in changes.executable else "cleared"
        return f"{headers}@@ the text is unchanged; the executable bit is {state} @@\n"
    old_lines, new_lines = _lines(old or b""), _lines(new or b"")
    if old_lines and new_lines and len(old_lines) + len(new_lines) > MAX_DIFF_LINES:
        return f"{headers}@@ {len(old_lines)} lines became {len(new_lines)}: too many to diff here @@\n"
    hunks = list(difflib.unified_diff(old_lines, new_lines, before, after, lineterm="\n"))[2:]
    if not hunks and old and new:  # bytes that differ only where they are not UTF-8 decode alike
        return f"{headers}@@ the bytes differ only where they are not valid UTF-8 @@\n"
    return headers + "".join(_marked(line) for line in hunks)


def _lines(data: bytes) -> list[str]:
    """Lines as git splits them: at \\n only (splitlines would also split at \\r, \\f and more)."""
    parts = data.decode("utf-8", errors="replace").split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _marked(line: str) -> str:
    # A last line without a newline gets git's marker, so the diff still applies byte for byte.
    return line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}"


def _cut(text: str, cap_chars: int) -> str:
    # At the last whole line within the cap, unless even the first line is longer.
    head = text[:cap_chars]
    end = head.rfind("\n") + 1
    return head[:end] if end else head + "\n"


def _closing(cap_chars: int, rest: list[str]) -> str:
    named = f": {', '.join(rest[:10])}" if rest else ""
    return f"... diff cut at {cap_chars} characters: {len(rest)} more file(s) not shown{named}\n"
