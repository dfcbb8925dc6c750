"""Where a synthesis run spends its time: seconds and counts per stage, summed over the jobs' threads."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class StageClock:
    """Accumulates wall seconds per named stage; safe to use from several jobs at once."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - started)

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.seconds[name] += seconds
            self.counts[name] += 1

    def sequence(self, on_stage=None):
        """A callback for stages that follow one another: each call ends the stage before it (None ends the last)."""
        current: list = [None, 0.0]

        def enter(name: str | None) -> None:
            now = time.monotonic()
            if current[0] is not None:
                self.add(current[0], now - current[1])
            current[:] = [name, now]
            if name is not None and on_stage:
                on_stage(name)

        return enter

    def report(self) -> dict[str, dict[str, float]]:
        """{stage: {"s": total seconds, "n": times entered}}, slowest first."""
        with self._lock:
            ordered = sorted(self.seconds.items(), key=lambda item: -item[1])
            return {name: {"s": round(seconds, 2), "n": self.counts[name]} for name, seconds in ordered}
