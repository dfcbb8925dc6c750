"""Which split a task goes to: decided per repository (or per deleted file when asked), never per task.

Per repository, no test task shares a repository snapshot with a train task: a train workspace shows every unit but
its own, so a test task beside it would have its deleted code on display.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

from proto.tasks import TaskRecord


def split_of(repo: str, path: str, *, fixed: str | None, by: str, test_fraction: float) -> str:
    """`fixed` when given; else "test" for a stable `test_fraction` of repositories (or of files), "train" otherwise."""
    if fixed:
        return fixed
    key = repo if by == "repo" else f"{repo}:{path}"
    draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return "test" if draw < test_fraction else "train"


def mixed_snapshots(records: list[TaskRecord]) -> dict[str, list[str]]:
    """Repository snapshots (repo@commit) whose tasks are in more than one split, with those splits."""
    splits: dict[str, set[str]] = defaultdict(set)
    for record in records:
        splits[f"{record.repo}@{record.source_commit[:12]}"].add(record.split)
    return {snapshot: sorted(found) for snapshot, found in splits.items() if len(found) > 1}
