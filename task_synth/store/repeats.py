"""Duplicates are not yield: a task that deletes the same lines as a kept task of its snapshot, or whose FAIL_TO_PASS
set is the same, teaches nothing new (a stub and a removal of one function, say), so it is rejected as `duplicate`.

One exception: a candidate that deletes everything a kept task deletes and more asks for more, with more evidence of its
own (a class's constructor alone, then the constructor with the generator that holds its logic), so the same tests do
not make it a repeat."""

from __future__ import annotations

from collections.abc import Iterable

from proto.tasks import TaskRecord


def snapshot(repo: str, commit: str) -> str:
    """The key of one repository snapshot: duplicates are counted within it."""
    return f"{repo}@{commit}"


def _snapshot(record: TaskRecord) -> str:
    return snapshot(record.repo, record.source_commit)


class KeptTasks:
    """The kept tasks by what makes two of them one: their snapshot's deleted lines and FAIL_TO_PASS set."""

    def __init__(self, records: Iterable[TaskRecord] = ()):
        self._by_lines: dict[tuple[str, frozenset], str] = {}
        self._by_tests: dict[tuple[str, frozenset], list[tuple[frozenset, str]]] = {}
        for record in records:
            self.add(record)

    @staticmethod
    def _keys(record: TaskRecord) -> tuple[tuple[str, frozenset], tuple[str, frozenset]]:
        lines = frozenset((unit.path, unit.start_line, unit.end_line) for unit in record.deleted)
        return (_snapshot(record), lines), (_snapshot(record), frozenset(record.FAIL_TO_PASS))

    def repeated_by(self, record: TaskRecord) -> str | None:
        """The kept task `record` repeats, with what they share, or None (a task does not repeat itself)."""
        lines, tests = self._keys(record)
        return self._repeated(lines if record.deleted else None, tests, record.instance_id)

    def repeated_before_build(
        self, snapshot: str, lines: Iterable[tuple[str, int, int]], fail_to_pass: Iterable[str]
    ) -> str | None:
        """The kept task a validated candidate would repeat (its snapshot `repo@commit`, deleted (path, start, end)
        lines and FAIL_TO_PASS tests), known before the costly part of building its task."""
        return self._repeated((snapshot, frozenset(lines)), (snapshot, frozenset(fail_to_pass)), None)

    def repeated_lines(self, snapshot: str, lines: Iterable[tuple[str, int, int]]) -> str | None:
        """The kept task that deletes these lines of the snapshot, known before a candidate is even validated (a
        stub after a removal of the same unit)."""
        kept = self._by_lines.get((snapshot, frozenset(lines)))
        return f"deletes the same lines as {kept}" if kept else None

    def _repeated(self, lines, tests, itself: str | None) -> str | None:
        if lines is not None and self._by_lines.get(lines, itself) != itself:
            return f"deletes the same lines as {self._by_lines[lines]}"
        deleted = lines[1] if lines is not None else frozenset()
        for kept_lines, kept in self._by_tests.get(tests, []):
            if kept != itself and not kept_lines < deleted:
                return f"has the FAIL_TO_PASS tests of {kept}"
        return None

    def add(self, record: TaskRecord) -> None:
        lines, tests = self._keys(record)
        if record.deleted:
            self._by_lines.setdefault(lines, record.instance_id)
        self._by_tests.setdefault(tests, []).append((lines[1], record.instance_id))
