"""Episode traces in SQLite (WAL), written step by step so a crash loses at most the step in flight."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from proto.actions import ToolCall
from proto.observations import CodingObservation, RewardDetails
from proto.traces import EpisodeTrace, StepTrace

_SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    problem_statement TEXT NOT NULL,
    tools TEXT NOT NULL,
    status TEXT NOT NULL,
    reward REAL,
    reward_details TEXT,
    started_at TEXT NOT NULL,
    ended_at TEXT
);
CREATE TABLE IF NOT EXISTS steps (
    episode_id TEXT NOT NULL REFERENCES episodes(episode_id),
    idx INTEGER NOT NULL,
    action TEXT NOT NULL,
    observation TEXT NOT NULL,
    started_at TEXT NOT NULL,
    duration_s REAL NOT NULL,
    PRIMARY KEY (episode_id, idx)
);
CREATE INDEX IF NOT EXISTS episodes_by_task ON episodes(task_id, started_at);
"""


class TraceStore:
    """One SQLite file; every write commits at once. Safe to share between threads."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL keeps every committed transaction through a process kill; only a power loss can drop the last ones.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def start_episode(self, trace: EpisodeTrace) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO episodes VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, NULL)",
                (
                    trace.episode_id,
                    trace.task_id,
                    trace.problem_statement,
                    json.dumps(trace.tools),
                    trace.status,
                    trace.started_at.isoformat(),
                ),
            )

    def add_step(self, episode_id: str, step: StepTrace) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?)",
                (
                    episode_id,
                    step.index,
                    step.action.model_dump_json(),
                    step.observation.model_dump_json(),
                    step.started_at.isoformat(),
                    step.duration_s,
                ),
            )

    def end_episode(self, episode_id: str, status: str, ended_at: datetime, details: RewardDetails | None) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE episodes SET status = ?, ended_at = ?, reward = ?, reward_details = ? WHERE episode_id = ?",
                (
                    status,
                    ended_at.isoformat(),
                    details.reward if details else None,
                    details.model_dump_json() if details else None,
                    episode_id,
                ),
            )

    def list_episodes(
        self,
        task_id: str | None = None,
        status: str | None = None,
        min_reward: float | None = None,
        since: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[EpisodeTrace]:
        """Episodes (without their steps), newest first, filtered."""
        clauses, params = [], []
        for clause, value in (
            ("task_id = ?", task_id),
            ("status = ?", status),
            ("reward >= ?", min_reward),
            ("started_at >= ?", since.isoformat() if since else None),
        ):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._lock:
            rows = self._db.execute(
                f"SELECT * FROM episodes {where} ORDER BY started_at DESC LIMIT ? OFFSET ?", (*params, limit, offset)
            ).fetchall()
        return [self._episode(row, []) for row in rows]

    def get_episode(self, episode_id: str) -> EpisodeTrace | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM episodes WHERE episode_id = ?", (episode_id,)).fetchone()
            steps = self._db.execute("SELECT * FROM steps WHERE episode_id = ? ORDER BY idx", (episode_id,)).fetchall()
        return self._episode(row, steps) if row else None

    def iter_episodes(self) -> Iterator[EpisodeTrace]:
        """Every episode with its steps, oldest first (for export)."""
        with self._lock:
            ids = [row[0] for row in self._db.execute("SELECT episode_id FROM episodes ORDER BY started_at")]
        for episode_id in ids:
            trace = self.get_episode(episode_id)
            if trace:
                yield trace

    @staticmethod
    def _episode(row: tuple, steps: list[tuple]) -> EpisodeTrace:
        episode_id, task_id, problem, tools, status, reward, details, started, ended = row
        return EpisodeTrace(
            episode_id=episode_id,
            task_id=task_id,
            problem_statement=problem,
            tools=json.loads(tools),
            status=status,
            reward=reward,
            reward_details=RewardDetails.model_validate_json(details) if details else None,
            started_at=datetime.fromisoformat(started),
            ended_at=datetime.fromisoformat(ended) if ended else None,
            steps=[
                StepTrace(
                    index=idx,
                    action=ToolCall.model_validate_json(action),
                    observation=CodingObservation.model_validate_json(observation),
                    started_at=datetime.fromisoformat(step_started),
                    duration_s=duration,
                )
                for _, idx, action, observation, step_started, duration in steps
            ],
        )
