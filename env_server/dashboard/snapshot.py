"""One reading of everything the dashboard shows, built at most once per refresh however many pages watch."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel

from env_server.dashboard.trace_summaries import (
    RecentEpisode,
    RewardSummary,
    TaskPassRate,
    recent_episodes,
    reward_summary,
    task_pass_rates,
)
from env_server.observability.live_stats import MinuteFigures
from proto.health import ServerHealth

if TYPE_CHECKING:
    from env_server.lifecycle.runtime import EpisodeRuntime

log = logging.getLogger(__name__)

LATENCY_WINDOW_S = 300.0


class PoolReading(BaseModel):
    name: str
    image: str
    ready: int
    size: int
    failures: int


class DashboardSnapshot(BaseModel):
    """What `/dashboard` renders and `/dashboard/events` sends, one JSON object per refresh."""

    taken_at: datetime
    server_id: str
    health: ServerHealth
    pools: list[PoolReading]
    episodes_per_minute: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_steps: int
    minutes: list[MinuteFigures]
    rewards: RewardSummary
    recent: list[RecentEpisode]
    tasks: list[TaskPassRate]
    tasks_left_out: int
    trace_backlog: int
    twins_graded: int = 0  # impossible twins graded in the last 30 min
    twins_forged: int = 0  # of them, those that earned a reward: forgeries that beat the grader
    trace_error: str | None = None  # the database could not be read: the live figures are still current


def take_snapshot(runtime: EpisodeRuntime) -> DashboardSnapshot:
    live = runtime.live_stats
    p50, p95, steps = live.latency(LATENCY_WINDOW_S)
    twins_graded, twins_forged = live.twin_forgeries()
    try:
        rewards, recent = reward_summary(runtime.traces), recent_episodes(runtime.traces)
        (tasks, left_out), trace_error = task_pass_rates(runtime.traces), None
    except sqlite3.Error as error:
        log.warning("the dashboard could not read the trace database: %s", error)
        rewards, recent, tasks, left_out = RewardSummary(), [], [], 0
        trace_error = f"the trace database could not be read ({error}); the figures from it are missing"
    return DashboardSnapshot(
        taken_at=datetime.now(UTC),
        server_id=runtime.server_id,
        health=runtime.health(),
        pools=[
            PoolReading(name=name, image=pool.image, ready=pool.ready, size=pool.size, failures=pool.failures)
            for name, pool in sorted(runtime.sandboxes.pools.items())
        ],
        episodes_per_minute=live.episodes_per_minute(LATENCY_WINDOW_S),
        latency_p50_s=p50,
        latency_p95_s=p95,
        latency_steps=steps,
        minutes=live.minutes(30),
        rewards=rewards,
        recent=recent,
        tasks=tasks,
        tasks_left_out=left_out,
        trace_backlog=runtime.traces.backlog_records(),
        twins_graded=twins_graded,
        twins_forged=twins_forged,
        trace_error=trace_error,
    )


class SnapshotCache:
    """The newest snapshot, taken again only when it is older than `refresh_s`; one taker at a time."""

    def __init__(self, runtime: EpisodeRuntime, refresh_s: float):
        self._runtime, self._refresh_s = runtime, refresh_s
        self._lock = threading.Lock()
        self._taken = 0.0
        self._newest: tuple[DashboardSnapshot, str] | None = None

    def get(self) -> tuple[DashboardSnapshot, str]:
        """The snapshot and its JSON."""
        with self._lock:
            if self._newest is None or time.monotonic() - self._taken >= self._refresh_s:
                snapshot = take_snapshot(self._runtime)
                self._newest = (snapshot, snapshot.model_dump_json())
                self._taken = time.monotonic()
            return self._newest
