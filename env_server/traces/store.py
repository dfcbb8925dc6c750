"""Episode traces in SQLite (WAL), written step by step so a crash loses at most the step in flight."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from env_server.grading.change_set import ChangeSet
from env_server.observability.metrics import ServerMetrics
from env_server.traces.backlog import MIB, RecordKind, SqlValue, TraceBacklog, TraceWrite
from env_server.traces.submissions import decode_change_set, encode_change_set
from proto.actions import ToolCall
from proto.observations import CodingObservation, RewardDetails
from proto.traces import EpisodeTrace, StepTrace

OPEN_TIMEOUT_S = 5.0
WRITE_BUSY_TIMEOUT_S = 0.1
WRITE_ATTEMPTS = 3  # the write and two retries
DEFAULT_BACKLOG_BYTES = 64 * MIB

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
    ended_at TEXT,
    tampered INTEGER
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
CREATE TABLE IF NOT EXISTS submissions (
    episode_id TEXT PRIMARY KEY REFERENCES episodes(episode_id),
    change_set BLOB NOT NULL
);
"""
# Made once the later columns exist; they let the dashboard's summaries read indexes, not the wide rows.
_SUMMARY_INDEXES = """
CREATE INDEX IF NOT EXISTS episodes_by_start ON episodes(started_at);
CREATE INDEX IF NOT EXISTS episodes_by_outcome ON episodes(status, reward, tampered);
CREATE INDEX IF NOT EXISTS episodes_by_task_outcome ON episodes(task_id, reward, tampered);
CREATE INDEX IF NOT EXISTS episodes_by_run ON episodes(run_id, origin, task_id, ended_at);
"""
# The columns an EpisodeTrace is read from; `tampered` is a copy of reward_details' flag, so that the dashboard's
# counts need not parse every episode's JSON.
_EPISODE_COLUMNS = (
    "episode_id, task_id, problem_statement, tools, status, reward, reward_details, started_at, ended_at, "
    "prefix_of, prefix_steps, origin, run_id"
)


class TraceStore:
    """One SQLite file; every write commits at once, or waits in a backlog while the database refuses it.

    Safe to share between threads. Reads (`get_episode`, `list_episodes`) see the waiting records too.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=OPEN_TIMEOUT_S)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL keeps every committed transaction through a process kill; only a power loss can drop the last ones.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        _add_tampered_column(self._db)
        _add_later_columns(self._db)
        self._db.executescript(_SUMMARY_INDEXES)
        # A step must not wait seconds on a lock: a write that stays refused goes to the backlog instead.
        self._db.execute(f"PRAGMA busy_timeout = {int(WRITE_BUSY_TIMEOUT_S * 1000)}")
        self._lock = threading.Lock()
        self._backlog = TraceBacklog(self._commit, self._lock, str(self.path), DEFAULT_BACKLOG_BYTES, ServerMetrics())

    def report_to(self, metrics: ServerMetrics, backlog_bytes: int) -> None:
        """Count write failures, drops and the backlog in `metrics` (the server's), and bound the backlog."""
        with self._lock:
            self._backlog.limit_bytes = backlog_bytes
            self._backlog.report_to(metrics)

    def close(self) -> None:
        """Flush the backlog once more (what still fails is counted as dropped), then close the file."""
        self._backlog.close()
        with self._lock:
            self._db.close()

    def start_episode(self, trace: EpisodeTrace) -> None:
        started = trace.model_copy(update={"steps": []})
        self._write(
            "episode",
            trace.episode_id,
            f"INSERT INTO episodes ({_EPISODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, NULL, ?, ?, ?, ?)",
            (
                trace.episode_id,
                trace.task_id,
                trace.problem_statement,
                json.dumps(trace.tools),
                trace.status,
                trace.started_at.isoformat(),
                trace.prefix_of,
                trace.prefix_steps,
                trace.origin,
                trace.run_id,
            ),
            lambda _: started.model_copy(update={"steps": []}),
        )

    def add_step(self, episode_id: str, step: StepTrace) -> None:
        self._write(
            "step",
            episode_id,
            "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?)",
            (
                episode_id,
                step.index,
                step.action.model_dump_json(),
                step.observation.model_dump_json(),
                step.started_at.isoformat(),
                step.duration_s,
            ),
            lambda trace: trace and trace.model_copy(update={"steps": [*trace.steps, step]}),
        )

    def end_episode(self, episode_id: str, status: str, ended_at: datetime, details: RewardDetails | None) -> None:
        ended = {"status": status, "ended_at": ended_at, "reward": details.reward if details else None}
        self._write(
            "episode_end",
            episode_id,
            "UPDATE episodes SET status = ?, ended_at = ?, reward = ?, reward_details = ?, tampered = ? "
            "WHERE episode_id = ?",
            (
                status,
                ended_at.isoformat(),
                details.reward if details else None,
                details.model_dump_json() if details else None,
                int(details.tampered) if details else None,
                episode_id,
            ),
            lambda trace: trace and trace.model_copy(update={**ended, "reward_details": details}),
        )

    def add_submission(self, episode_id: str, changes: ChangeSet) -> None:
        """The change set an episode's grading graded, kept so that `regrow traces regrade` grades the same bytes."""
        self._write(
            "submission",
            episode_id,
            "INSERT OR REPLACE INTO submissions VALUES (?, ?)",
            (episode_id, encode_change_set(changes)),
            lambda trace: trace,
        )

    def get_submission(self, episode_id: str) -> ChangeSet | None:
        """The graded change set of an episode; None for one not graded, or graded before change sets were kept."""
        with self._lock:
            row = self._db.execute("SELECT change_set FROM submissions WHERE episode_id = ?", (episode_id,)).fetchone()
            waiting = [w.params[1] for w in self._backlog.pending(episode_id) if w.record == "submission"]
        blob = waiting[-1] if waiting else row[0] if row else None
        return decode_change_set(blob) if isinstance(blob, bytes) else None

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
        filters = (
            ("task_id = ?", task_id),
            ("status = ?", status),
            ("reward >= ?", min_reward),
            ("started_at >= ?", since.isoformat() if since else None),
        )
        clauses = [clause for clause, value in filters if value is not None]
        params = [value for _, value in filters if value is not None]
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._lock:
            # Episodes with waiting records leave the query's page and are judged once those are applied.
            touched: dict[str, list[TraceWrite]] = {}
            for write in self._backlog.pending():
                touched.setdefault(write.episode_id, []).append(write)
            page = (limit, offset) if not touched else (offset + limit + len(touched), 0)
            rows = self._db.execute(
                f"SELECT {_EPISODE_COLUMNS} FROM episodes {where} ORDER BY started_at DESC LIMIT ? OFFSET ?",
                (*params, *page),
            ).fetchall()
            bases = {
                episode_id: self._db.execute(
                    f"SELECT {_EPISODE_COLUMNS} FROM episodes WHERE episode_id = ?", (episode_id,)
                ).fetchone()
                for episode_id in touched
            }
        episodes = [self._episode(row, []) for row in rows if row[0] not in touched]
        if not touched:
            return episodes
        for episode_id, writes in touched.items():
            trace = self._episode(bases[episode_id], []) if bases[episode_id] else None
            for write in writes:
                trace = write.apply(trace)
            if trace and _matches(trace, task_id, status, min_reward, since):
                episodes.append(trace.model_copy(update={"steps": []}))
        episodes.sort(key=lambda trace: trace.started_at.isoformat(), reverse=True)
        return episodes[offset : offset + limit]

    def get_episode(self, episode_id: str) -> EpisodeTrace | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_EPISODE_COLUMNS} FROM episodes WHERE episode_id = ?", (episode_id,)
            ).fetchone()
            steps = self._db.execute("SELECT * FROM steps WHERE episode_id = ? ORDER BY idx", (episode_id,)).fetchall()
            pending = self._backlog.pending(episode_id)
        trace = self._episode(row, steps) if row else None
        for write in pending:
            trace = write.apply(trace)
        return trace

    def read(self, sql: str, params: tuple[SqlValue, ...] = ()) -> list[tuple]:
        """The rows of one read-only query (the dashboard's summaries); records still in the backlog are not in them."""
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def backlog_records(self) -> int:
        with self._lock:
            return len(self._backlog.pending())

    def iter_episodes(self) -> Iterator[EpisodeTrace]:
        """Every episode with its steps, oldest first (for export)."""
        with self._lock:
            ids = [row[0] for row in self._db.execute("SELECT episode_id FROM episodes ORDER BY started_at")]
        for episode_id in ids:
            trace = self.get_episode(episode_id)
            if trace:
                yield trace

    def _write(
        self,
        record: RecordKind,
        episode_id: str,
        sql: str,
        params: tuple[SqlValue, ...],
        apply: Callable[[EpisodeTrace | None], EpisodeTrace | None],
    ) -> None:
        with self._lock:
            self._backlog.write(TraceWrite(record, episode_id, sql, params, apply), WRITE_ATTEMPTS)

    def _commit(self, writes: list[TraceWrite], attempts: int) -> list[tuple[TraceWrite, sqlite3.Error]]:
        """Commit `writes` in one transaction, trying `attempts` times; the writes the database rejected for good."""
        for _ in range(attempts - 1):
            with contextlib.suppress(sqlite3.OperationalError):
                return self._commit_once(writes)
        return self._commit_once(writes)

    def _commit_once(self, writes: list[TraceWrite]) -> list[tuple[TraceWrite, sqlite3.Error]]:
        rejected: list[tuple[TraceWrite, sqlite3.Error]] = []
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for write in writes:
                try:
                    self._db.execute(write.sql, write.params)
                except sqlite3.OperationalError:
                    raise
                except sqlite3.Error as error:  # a constraint: retrying cannot help
                    rejected.append((write, error))
            self._db.execute("COMMIT")
        except sqlite3.Error:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            raise
        return rejected

    @staticmethod
    def _episode(row: tuple, steps: list[tuple]) -> EpisodeTrace:
        episode_id, task_id, problem, tools, status, reward, details, started, ended, prefix_of, prefix_steps = row[:11]
        origin, run_id = row[11:]
        return EpisodeTrace(
            prefix_of=prefix_of,
            prefix_steps=prefix_steps or 0,
            origin=origin or ("prefix" if prefix_of else "training"),
            run_id=run_id,
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


def _add_tampered_column(db: sqlite3.Connection) -> None:
    """A database written before the column existed gets it, filled from the JSON once."""
    if any(row[1] == "tampered" for row in db.execute("PRAGMA table_info(episodes)")):
        return
    with contextlib.suppress(sqlite3.OperationalError):  # another server on the same file added it first
        db.execute("ALTER TABLE episodes ADD COLUMN tampered INTEGER")
    db.execute(
        "UPDATE episodes SET tampered = json_extract(reward_details, '$.tampered') "
        "WHERE reward_details IS NOT NULL AND tampered IS NULL"
    )


def _add_later_columns(db: sqlite3.Connection) -> None:
    """A database written before prefix resets, or before episodes had an origin, gets those columns (empty: an
    earlier episode is read as training, or as a prefix where it had one)."""
    present = {row[1] for row in db.execute("PRAGMA table_info(episodes)")}
    columns = (("prefix_of", "TEXT"), ("prefix_steps", "INTEGER"), ("origin", "TEXT"), ("run_id", "TEXT"))
    for column, kind in columns:
        if column not in present:
            with contextlib.suppress(sqlite3.OperationalError):  # another server on the same file added it first
                db.execute(f"ALTER TABLE episodes ADD COLUMN {column} {kind}")


def _matches(
    trace: EpisodeTrace, task_id: str | None, status: str | None, min_reward: float | None, since: datetime | None
) -> bool:
    """`list_episodes`' SQL filter, for an episode read from the backlog."""
    return (
        (task_id is None or trace.task_id == task_id)
        and (status is None or trace.status == status)
        and (min_reward is None or (trace.reward is not None and trace.reward >= min_reward))
        and (since is None or trace.started_at.isoformat() >= since.isoformat())
    )
