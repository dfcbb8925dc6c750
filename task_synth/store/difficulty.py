"""The spread of the tasks' difficulty signals, which `regrow synth` prints and the corpus bench reports."""

from __future__ import annotations

import statistics

from proto.tasks import TaskRecord

SIGNALS = {
    "lines deleted": lambda stats: stats.lines_deleted,
    "cyclomatic complexity": lambda stats: stats.complexity,
    "covering tests": lambda stats: stats.covering_tests,
    "FAIL_TO_PASS tests": lambda stats: stats.fail_to_pass,
    "problem statement chars": lambda stats: stats.statement_chars,
}


def spread(records: list[TaskRecord]) -> dict[str, dict[str, float]]:
    """min, median and max of each signal over `records`; empty when there are none."""
    if not records:
        return {}
    result = {}
    for name, signal in SIGNALS.items():
        values = [signal(record.stats) for record in records]
        result[name] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    return result
