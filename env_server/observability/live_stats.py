"""Rolling windows of what just happened on one server: step latencies and episode ends, by minute."""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

WINDOW_S = 30 * 60.0
MAX_STEPS = 50_000  # bounds memory under any load; older steps fall out of the latency window first


@dataclass(frozen=True)
class MinuteFigures:
    """One minute of the window: episodes ended in it and the p95 step latency of its steps (None if none)."""

    minute: int  # minutes before now: 0 is the current one
    episodes: int
    p95_s: float | None


def percentile(values: list[float], fraction: float) -> float | None:
    """The `fraction` quantile (0..1), interpolated between ranks as `statistics.quantiles` does; None for none."""
    if not values:
        return None
    if len(values) == 1 or fraction <= 0:
        return min(values)
    if fraction >= 1:
        return max(values)
    return statistics.quantiles(values, n=1000, method="inclusive")[round(fraction * 1000) - 1]


class LiveStats:
    """Thread-safe: the runtime records, the dashboard reads. Times come from `clock` (monotonic seconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = WINDOW_S):
        self._clock, self._window_s = clock, window_s
        self._steps: deque[tuple[float, float]] = deque(maxlen=MAX_STEPS)
        self._ends: deque[float] = deque()
        self._twins: deque[tuple[float, bool]] = deque()
        self._lock = threading.Lock()

    def record_step(self, duration_s: float) -> None:
        with self._lock:
            self._steps.append((self._clock(), duration_s))

    def record_end(self) -> None:
        with self._lock:
            self._ends.append(self._clock())
            self._forget(self._clock())

    def record_twin(self, forged: bool) -> None:
        """An impossible twin was graded; `forged`: it earned a reward."""
        with self._lock:
            self._twins.append((self._clock(), forged))
            self._forget(self._clock())

    def twin_forgeries(self) -> tuple[int, int]:
        """(twins graded, of them forged) over the window."""
        with self._lock:
            self._forget(self._clock())
            return len(self._twins), sum(forged for _, forged in self._twins)

    def episodes_per_minute(self, over_s: float = 300.0) -> float:
        """Episodes ended per minute over the last `over_s` seconds (or since the first record, if sooner)."""
        now = self._clock()
        with self._lock:
            self._forget(now)
            ended = sum(1 for at in self._ends if at >= now - over_s)
        return ended * 60.0 / over_s

    def latency(self, over_s: float = 300.0) -> tuple[float | None, float | None, int]:
        """p50 and p95 step latency in seconds over the last `over_s` seconds, and the number of steps."""
        now = self._clock()
        with self._lock:
            durations = sorted(d for at, d in self._steps if at >= now - over_s)
        return percentile(durations, 0.5), percentile(durations, 0.95), len(durations)

    def minutes(self, count: int = 30) -> list[MinuteFigures]:
        """The last `count` minutes, oldest first."""
        now = self._clock()
        with self._lock:
            self._forget(now)
            ends = list(self._ends)
            steps = list(self._steps)
        ended: list[int] = [0] * count
        durations: list[list[float]] = [[] for _ in range(count)]
        for at in ends:
            if (minute := int((now - at) // 60.0)) < count:
                ended[minute] += 1
        for at, duration in steps:
            if (minute := int((now - at) // 60.0)) < count:
                durations[minute].append(duration)
        return [
            MinuteFigures(minute, ended[minute], percentile(durations[minute], 0.95))
            for minute in range(count - 1, -1, -1)
        ]

    def _forget(self, now: float) -> None:
        while self._ends and self._ends[0] < now - self._window_s:
            self._ends.popleft()
        while self._steps and self._steps[0][0] < now - self._window_s:
            self._steps.popleft()
        while self._twins and self._twins[0][0] < now - self._window_s:
            self._twins.popleft()
