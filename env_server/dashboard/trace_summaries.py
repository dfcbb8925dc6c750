"""What the dashboard reads from the trace database: recent episodes, the reward distribution, per-task pass rates.

Every query is an aggregate or a short page, so a snapshot stays cheap on a database of many thousand episodes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from env_server.traces.store import TraceStore
from proto import PASS_REWARD, is_pass

# Bin edges of the reward histogram: 0 and 1 are bins of their own, the rest are tenths.
REWARD_BINS = ["0", "0-0.1", "0.1-0.2", "0.2-0.3", "0.3-0.4", "0.4-0.5", "0.5-0.6", "0.6-0.7", "0.7-0.8", "0.8-0.9",
               "0.9-1", "1"]  # fmt: skip


class RecentEpisode(BaseModel):
    episode_id: str
    task_id: str
    status: str
    reward: float | None
    steps: int
    started_at: datetime
    duration_s: float
    flags: list[str]


class TaskPassRate(BaseModel):
    task_id: str
    episodes: int
    graded: int
    passed: int
    mean_reward: float | None
    tampered: int

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.graded if self.graded else None


class RewardSummary(BaseModel):
    bins: list[str] = REWARD_BINS
    counts: list[int] = Field(default_factory=lambda: [0] * len(REWARD_BINS))
    graded: int = 0
    tampered: int = 0
    by_status: dict[str, int] = Field(default_factory=dict)


def reward_bin(reward: float) -> int:
    """The index in REWARD_BINS of one reward."""
    if reward <= 0.0:
        return 0
    if is_pass(reward):
        return len(REWARD_BINS) - 1
    return 1 + min(int(reward * 10), 9)


def reward_summary(store: TraceStore) -> RewardSummary:
    counts, tampered, by_status = [0] * len(REWARD_BINS), 0, dict[str, int]()
    # One pass over an index: rewards are fractions of a few tests, so the groups stay few however many episodes.
    for status, reward, forged, count in store.read(
        "SELECT status, reward, tampered, count(*) FROM episodes GROUP BY status, reward, tampered"
    ):
        by_status[status] = by_status.get(status, 0) + count
        if reward is not None:
            counts[reward_bin(reward)] += count
        tampered += count if forged == 1 else 0
    return RewardSummary(counts=counts, graded=sum(counts), tampered=tampered, by_status=by_status)


def recent_episodes(store: TraceStore, limit: int = 25, now: datetime | None = None) -> list[RecentEpisode]:
    """The newest `limit` episodes, running ones included, with their step count and flags."""
    now = now or datetime.now(UTC)
    rows = store.read(
        "SELECT e.episode_id, e.task_id, e.status, e.reward, e.started_at, e.ended_at, "
        "e.tampered, json_extract(e.reward_details, '$.tamper_reasons'), "
        "json_array_length(e.reward_details, '$.refused'), json_extract(e.reward_details, '$.error'), "
        "(SELECT count(*) FROM steps s WHERE s.episode_id = e.episode_id) "
        "FROM episodes e ORDER BY e.started_at DESC LIMIT ?",
        (limit,),
    )
    episodes = []
    for episode_id, task_id, status, reward, started, ended, tampered, reasons, refused, error, steps in rows:
        started_at = datetime.fromisoformat(started)
        ended_at = datetime.fromisoformat(ended) if ended else now
        flags = [f"tampered: {', '.join(json.loads(reasons))}" if reasons else "tampered"] if tampered else []
        if refused:
            flags.append(f"{refused} edit(s) refused")
        if error:
            flags.append("grading error")
        if status == "aborted":
            flags.append("aborted")
        episodes.append(
            RecentEpisode(
                episode_id=episode_id,
                task_id=task_id,
                status=status,
                reward=reward,
                steps=steps,
                started_at=started_at,
                duration_s=max(0.0, (ended_at - started_at).total_seconds()),
                flags=flags,
            )
        )
    return episodes


def task_pass_rates(store: TraceStore, limit: int = 500) -> tuple[list[TaskPassRate], int]:
    """Per task over every recorded episode, hardest first (lowest pass rate); and how many tasks were left out."""
    rows = store.read(
        "SELECT task_id, count(*), count(reward), coalesce(sum(reward >= ?), 0), avg(reward), "
        "coalesce(sum(tampered = 1), 0) "
        "FROM episodes GROUP BY task_id "
        "ORDER BY coalesce(1.0 * sum(reward >= ?) / nullif(count(reward), 0), 2), task_id",
        (PASS_REWARD, PASS_REWARD),
    )
    rates = [
        TaskPassRate(task_id=t, episodes=n, graded=g, passed=p, mean_reward=m, tampered=x) for t, n, g, p, m, x in rows
    ]
    return rates[:limit], max(0, len(rates) - limit)
