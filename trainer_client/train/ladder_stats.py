"""The ladder as an experiment: each arm's mean pass@1 over seeds with a 95% interval, and its difference from A1
paired by seed (the same task order, sampling seed and evaluation draws), with its own interval."""

from __future__ import annotations

import math
import statistics

from pydantic import BaseModel, Field

# Student's t at 0.975 for 1..30 degrees of freedom; past 30 the normal quantile is close enough.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


class Interval(BaseModel):
    """A mean over seeds and its 95% t-interval; no bounds with fewer than two seeds."""

    mean: float
    low: float | None = None
    high: float | None = None
    seeds: int

    def text(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.mean:.3f} (1 seed: no interval)"
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def interval(values: list[float]) -> Interval:
    """The mean of `values` with its 95% t-interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean=mean, seeds=len(values))
    t = _T975[len(values) - 2] if len(values) - 1 <= len(_T975) else 1.96
    half = t * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean=mean, low=mean - half, high=mean + half, seeds=len(values))


class ArmSummary(BaseModel):
    """One arm over its seeds."""

    name: str
    pass_at_1: Interval
    versus_first: Interval | None = Field(
        default=None, description="pass@1 minus A1's, seed by seed; None for A1 itself or an arm that did not run."
    )


def paired_difference(arm: dict[int, float], first: dict[int, float]) -> Interval | None:
    """The arm's pass@1 minus the first arm's over the seeds both ran."""
    shared = sorted(set(arm) & set(first))
    return interval([arm[seed] - first[seed] for seed in shared]) if shared else None
