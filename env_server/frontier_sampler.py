"""The frontier sampler: serve the tasks whose recorded pass rate is nearest one half.

A GRPO group whose episodes all pass, or all fail, carries no gradient (OpenEnv's curriculum pilot found 80% of groups
so). A task's chance of being drawn is proportional to p(1 - p), the variance of one episode's outcome at its recorded
pass rate p, plus a floor so that no task of a split is ever starved; an exploration share of the draws goes to the
tasks graded fewer than `min_seen` times. Every draw is reproducible from the reset's seed. The pass rates are the
drawing run's own, over its latest training episodes of each task: demonstrations, evaluations, prefix resets and
other runs say nothing of the policy that draws.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# The weight of a task whose pass rate is 0 or 1, against 0.25 at one half: drawn now and then, never starved.
FLOOR = 0.01


@dataclass(frozen=True)
class Graded:
    """A task's graded episodes and how many of them passed."""

    episodes: int
    passed: int

    @property
    def variance(self) -> float:
        rate = self.passed / self.episodes
        return rate * (1 - rate)


def frontier_pick(
    ids: list[str], graded: Mapping[str, Graded], rng: random.Random, explore_share: float, min_seen: int
) -> str:
    """One of `ids`: a little-seen task with probability `explore_share` (always, while every task is little-seen),
    else a task drawn with weight p(1 - p) + FLOOR."""
    if not ids:
        raise ValueError("frontier_pick needs at least one task")
    ordered = sorted(ids)
    fresh = [task for task in ordered if graded.get(task, Graded(0, 0)).episodes < min_seen]
    explore = rng.random() < explore_share
    if fresh and (explore or len(fresh) == len(ordered)):
        return rng.choice(fresh)
    little_seen = set(fresh)  # once: a split can hold thousands of tasks
    known = [task for task in ordered if task not in little_seen]
    weights = [graded[task].variance + FLOOR for task in known]
    return rng.choices(known, weights=weights)[0]


class PassRates:
    """Each task's graded episodes for one training run (None: runs that did not say), read from the trace store at
    most every `refresh_s` seconds per run."""

    def __init__(self, read: Callable[[str | None], dict[str, Graded]], refresh_s: float = 5.0) -> None:
        self._read, self._refresh_s = read, refresh_s
        self._lock = threading.Lock()
        self._rates: dict[str | None, tuple[float, dict[str, Graded]]] = {}

    def current(self, run_id: str | None = None) -> dict[str, Graded]:
        with self._lock:
            read_at, rates = self._rates.get(run_id, (float("-inf"), {}))
            if time.monotonic() - read_at >= self._refresh_s:
                rates = self._read(run_id)
                self._rates[run_id] = (time.monotonic(), rates)
            return rates
