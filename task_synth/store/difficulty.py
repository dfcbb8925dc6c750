"""The spread of the tasks' difficulty signals, which `regrow synth` and `regrow tasks export` print and the corpus
bench reports: the feature's size (lines, units, tests reached), its tests, and how many plausible wrong solutions
(mutants of the unit) its checks fail."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from proto.tasks import TaskRecord

SIGNALS: dict[str, Callable[[TaskRecord], float | None]] = {
    "lines deleted": lambda record: record.stats.lines_deleted,
    "units deleted": lambda record: len(record.deleted),
    "cyclomatic complexity": lambda record: record.stats.complexity,
    "covering tests": lambda record: record.stats.covering_tests,
    "FAIL_TO_PASS tests": lambda record: record.stats.fail_to_pass,
    "hidden checks": lambda record: record.stats.hidden_checks,
    "mutant kill rate": lambda record: record.stats.mutant_kill_rate,  # None where no mutant could be judged
    "problem statement chars": lambda record: record.stats.statement_chars,
}


def spread(records: list[TaskRecord]) -> dict[str, dict[str, float]]:
    """min, median and max of each signal over the `records` that have it; a signal none has is left out."""
    result = {}
    for name, signal in SIGNALS.items():
        values = [value for record in records if (value := signal(record)) is not None]
        if values:
            result[name] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    return result
