"""Reads a task store (its layout is proto.task_files) and picks tasks by id or by seed and split."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proto.task_files import (
    IO_CHECKS,
    PRISTINE_TESTS,
    RECORDS,
    TWIN_OF,
    TWINS,
    hidden_dir,
    install_archive,
    read_records,
)
from proto.tasks import IoCheck, TaskRecord


class UnknownTask(LookupError):
    """A reset named a task, or a split, that the store does not have."""


@dataclass(frozen=True)
class Task:
    """One task with the paths of the grader's hidden files."""

    record: TaskRecord
    hidden_dir: Path
    store_root: Path | None = None

    @property
    def id(self) -> str:
        return self.record.instance_id

    @property
    def as_files(self) -> bool:
        """True when the task is files on top of its repository's image, False when its image holds the workspace."""
        return self.record.workspace_archive is not None

    def _stored(self, relative: str) -> bytes:
        root = self.store_root or self.hidden_dir.parent.parent
        path = root / relative
        if not path.is_file():
            raise FileNotFoundError(
                f"task {self.id}: {path} is missing; copy the whole task store, or synthesize it again"
            )
        return path.read_bytes()

    def workspace_archive(self) -> bytes:
        """The gzipped tar of the task's /workspace, rooted at `workspace/`."""
        return self._stored(self.record.workspace_archive or "")

    def install_archive(self) -> bytes:
        """The gzipped tar of what the editable install adds to the repository image, rooted at /."""
        return self._stored(install_archive(self.record.repo_dir or ""))

    @property
    def pool_key(self) -> str:
        """Tasks with one key can share warm containers: the same image and, for tasks as files, the same install."""
        return f"{self.record.image} {self.record.repo_dir}" if self.as_files else self.record.image

    def pristine_tests(self) -> dict[str, bytes]:
        """Each test file's pristine bytes, by path relative to the repository root."""
        files = {}
        for path in self.record.test_files:
            source = self.hidden_dir / PRISTINE_TESTS / path
            if not source.is_file():
                raise FileNotFoundError(f"task {self.id}: pristine test {source} is missing; rebuild the task store")
            files[path] = source.read_bytes()
        return files

    @property
    def twin_of(self) -> str | None:
        """For an impossible twin, the id of the task it copies (kept in its hidden folder); None for a task."""
        marker = self.hidden_dir / TWIN_OF
        return marker.read_text().strip() if marker.is_file() else None

    def io_checks(self) -> list[IoCheck]:
        """Recorded calls of the deleted unit that the grader replays as hidden tests; none for older stores."""
        source = self.hidden_dir / IO_CHECKS
        if not source.is_file():
            return []
        return [IoCheck.model_validate(item) for item in json.loads(source.read_text())]


class TaskStore:
    """The tasks of one directory, loaded once."""

    def __init__(self, root: Path):
        self.root = Path(root)
        jsonl = self.root / RECORDS
        if not jsonl.is_file():
            raise FileNotFoundError(f"{jsonl} not found: point --tasks at a directory written by `regrow synth`")
        self.tasks: dict[str, Task] = {
            record.instance_id: Task(record, hidden_dir(self.root, record.instance_id), self.root)
            for record in read_records(self.root)
        }
        if not self.tasks:
            raise ValueError(f"{jsonl} holds no tasks")
        # Twins are served like tasks but never sampled as one: only a reset's twin draw picks them.
        self.twins: dict[str, Task] = {
            record.instance_id: Task(record, hidden_dir(self.root, record.instance_id), self.root)
            for record in read_records(self.root, TWINS)
            if record.instance_id not in self.tasks
        }
        for task in [*self.tasks.values(), *self.twins.values()]:
            if task.as_files:
                for relative in (task.record.workspace_archive or "", install_archive(task.record.repo_dir or "")):
                    if not (self.root / relative).is_file():
                        raise FileNotFoundError(
                            f"task {task.id}: {self.root / relative} is missing; copy the whole task "
                            "store, or synthesize it again"
                        )

    def missing_images(self, exists) -> list[str]:
        """The images of the store that `exists(tag)` says the engine lacks."""
        return [image for image in self.images() if not exists(image)]

    def images(self) -> list[str]:
        return sorted({task.record.image for task in self.tasks.values()})

    def pool_keys(self) -> dict[str, list[Task]]:
        """The tasks of each pool key, in id order; the first one's `prepare` readies containers for all of them."""
        keys: dict[str, list[Task]] = {}
        for task in sorted([*self.tasks.values(), *self.twins.values()], key=lambda t: t.id):
            keys.setdefault(task.pool_key, []).append(task)
        return dict(sorted(keys.items()))

    def splits(self) -> list[str]:
        return sorted({task.record.split for task in self.tasks.values()})

    def get(self, task_id: str) -> Task:
        try:
            return self.tasks.get(task_id) or self.twins[task_id]
        except KeyError:
            known = ", ".join(sorted(self.tasks)[:5])
            raise UnknownTask(f"unknown task {task_id!r}; known tasks include: {known}") from None

    def pick(
        self,
        task_id: str | None,
        seed: int | None,
        split: str | None,
        twin_rate: float = 0.0,
        choose: Callable[[list[str], random.Random], str] | None = None,
    ) -> Task:
        """The named task, else one sampled from `split` (default train) with `seed`: a twin with probability
        `twin_rate`, where the split has twins; `choose` picks among the split's ids (default: uniformly)."""
        if task_id is not None:
            return self.get(task_id)
        split = split or "train"
        ids = sorted(t.id for t in self.tasks.values() if t.record.split == split)
        if not ids:
            raise UnknownTask(f"no tasks in split {split!r}; splits: {', '.join(self.splits())}")
        rng = random.Random(seed)
        twins = sorted(t.id for t in self.twins.values() if t.record.split == split)
        if twins and rng.random() < twin_rate:
            return self.twins[rng.choice(twins)]
        return self.tasks[choose(ids, rng) if choose is not None else rng.choice(ids)]
