"""Reads a task store (tasks.jsonl plus hidden/<id>/) and picks tasks by id or by seed and split."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from proto.tasks import IoCheck, TaskRecord


class UnknownTask(LookupError):
    """A reset named a task, or a split, that the store does not have."""


@dataclass(frozen=True)
class Task:
    """One task with the paths of the grader's hidden files."""

    record: TaskRecord
    hidden_dir: Path

    @property
    def id(self) -> str:
        return self.record.instance_id

    def pristine_tests(self) -> dict[str, bytes]:
        """Each test file's pristine bytes, by path relative to the repository root."""
        files = {}
        for path in self.record.test_files:
            source = self.hidden_dir / "tests" / path
            if not source.is_file():
                raise FileNotFoundError(f"task {self.id}: pristine test {source} is missing; rebuild the task store")
            files[path] = source.read_bytes()
        return files


    def io_checks(self) -> list[IoCheck]:
        """Recorded calls of the deleted unit that the grader replays as hidden tests; none for older stores."""
        source = self.hidden_dir / "io_checks.json"
        if not source.is_file():
            return []
        return [IoCheck.model_validate(item) for item in json.loads(source.read_text())]


class TaskStore:
    """The tasks of one directory, loaded once."""

    def __init__(self, root: Path):
        self.root = Path(root)
        jsonl = self.root / "tasks.jsonl"
        if not jsonl.is_file():
            raise FileNotFoundError(f"{jsonl} not found: point --tasks at a directory written by `regrow synth`")
        self.tasks: dict[str, Task] = {}
        for number, line in enumerate(jsonl.read_text().splitlines(), 1):
            if line.strip():
                record = TaskRecord.model_validate_json(line)
                self.tasks[record.instance_id] = Task(record, self.root / "hidden" / record.instance_id)
        if not self.tasks:
            raise ValueError(f"{jsonl} holds no tasks")

    def images(self) -> list[str]:
        return sorted({task.record.image for task in self.tasks.values()})

    def splits(self) -> list[str]:
        return sorted({task.record.split for task in self.tasks.values()})

    def get(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            known = ", ".join(sorted(self.tasks)[:5])
            raise UnknownTask(f"unknown task {task_id!r}; known tasks include: {known}") from None

    def pick(self, task_id: str | None, seed: int | None, split: str | None) -> Task:
        """The named task, else one sampled from `split` (default train) with `seed`."""
        if task_id is not None:
            return self.get(task_id)
        split = split or "train"
        ids = sorted(t.id for t in self.tasks.values() if t.record.split == split)
        if not ids:
            raise UnknownTask(f"no tasks in split {split!r}; splits: {', '.join(self.splits())}")
        return self.tasks[random.Random(seed).choice(ids)]
