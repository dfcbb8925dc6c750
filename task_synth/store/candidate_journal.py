"""Which candidates of one repository snapshot a store has judged already, so that a rerun goes on where the last
run stopped instead of validating them again.

One JSON line per candidate, appended and synced after its task (if any) is in the store: a line never names a task
the store lacks. A run killed while writing leaves at most a torn last line, which is read as not judged.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)
JOURNAL_DIR = "synth-journal"
VALID = "valid"


@dataclass(frozen=True)
class Judged:
    """One candidate's outcome: `valid` (its task is `instance_id`) or the rejection's reason."""

    outcome: str
    instance_id: str | None = None
    test_executions: int = 0


class CandidateJournal:
    """The judged candidates of one snapshot (`repos/<slug>-<commit>`) in `store`, by candidate key."""

    def __init__(self, store: Path, snapshot: str):
        self.path = store / JOURNAL_DIR / f"{snapshot.replace('/', '_')}.jsonl"
        self.judged: dict[str, Judged] = {}
        if self.path.exists():
            for number, line in enumerate(self.path.read_text().splitlines(), 1):
                try:
                    entry = json.loads(line)
                    candidate = entry.pop("candidate")
                    self.judged[candidate] = Judged(**entry)
                except (ValueError, TypeError, KeyError):
                    log.warning("%s:%d is torn or foreign; its candidate will be judged again", self.path, number)

    @staticmethod
    def key(unit_key: str, mode: str) -> str:
        return f"{unit_key} [{mode}]"

    def record(self, candidate: str, judged: Judged) -> None:
        self.judged[candidate] = judged
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as journal:
            journal.write(json.dumps({"candidate": candidate, **asdict(judged)}) + "\n")
            journal.flush()
            os.fsync(journal.fileno())
