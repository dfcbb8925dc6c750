"""Trace writes a locked or full database refused: held in order in memory, bounded, retried once a second."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from env_server.observability.metrics import ServerMetrics
from proto.traces import EpisodeTrace
from sandbox.lifecycle.periodic import Periodic

log = logging.getLogger(__name__)

MIB = 1024 * 1024
RETRY_INTERVAL_S = 1.0
# Records committed per transaction when the backlog drains; steps wait at most one batch for the lock.
DRAIN_BATCH = 200

RecordKind = Literal["episode", "step", "episode_end", "submission"]
RECORD_KINDS: tuple[RecordKind, ...] = ("episode", "step", "episode_end", "submission")
SqlValue = str | bytes | int | float | None


@dataclass(frozen=True)
class TraceWrite:
    """One statement of the trace store, and what it changes in its episode's trace (for reads while it waits)."""

    record: RecordKind
    episode_id: str
    sql: str
    params: tuple[SqlValue, ...]
    apply: Callable[[EpisodeTrace | None], EpisodeTrace | None]

    @property
    def size(self) -> int:
        """Bytes it holds, roughly: its text twice, as SQL parameters and in the trace `apply` keeps for reads."""
        return 2 * (len(self.sql) + sum(len(value) if isinstance(value, str | bytes) else 8 for value in self.params))


# Commits a batch in one transaction, or raises sqlite3.Error (locked, full) to have it retried later; returns the
# writes the database rejected for good (a constraint), each with its error.
Commit = Callable[[list[TraceWrite], int], list[tuple[TraceWrite, sqlite3.Error]]]


class TraceBacklog:
    """The one path of trace writes: straight to the database, or, while it refuses them, into an ordered backlog.

    Callers hold `lock`, the lock of the store's connection (but for close), so reads see database and backlog at once.
    """

    def __init__(self, commit: Commit, lock: threading.Lock, where: str, limit_bytes: int, metrics: ServerMetrics):
        self._commit, self._lock, self._where = commit, lock, where
        self.limit_bytes = limit_bytes
        self.metrics = metrics
        self._waiting: deque[TraceWrite] = deque()
        self._bytes = 0
        self._failing_since: float | None = None
        self._written_late = 0
        self._dropped = 0
        self._retries = Periodic("trace-backlog", RETRY_INTERVAL_S, self._drain)

    def report_to(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics
        for kind in RECORD_KINDS:  # every series exists from the start, at 0
            metrics.trace_records_dropped.labels(kind)
        metrics.trace_backlog_records.set(len(self._waiting))

    def write(self, write: TraceWrite, attempts: int) -> None:
        """Commit `write`, or queue it behind the ones already waiting (order is kept); never raises."""
        if self._waiting:
            self._add(write)
            return
        try:
            rejected = self._commit([write], attempts)
        except sqlite3.Error as error:
            self._fail(error)
            self._add(write)
            return
        self._drop_rejected(rejected)
        self._note_recovery()

    def pending(self, episode_id: str | None = None) -> list[TraceWrite]:
        """The waiting writes (of one episode), oldest first."""
        return [w for w in self._waiting if episode_id is None or w.episode_id == episode_id]

    def close(self) -> None:
        """Stop retrying, flush once more, and count what still cannot be written as dropped."""
        self._retries.stop(timeout=None)  # a retry in progress finishes first
        error = self._drain()
        with self._lock:
            if not self._waiting:
                return
            left = len(self._waiting)
            for write in self._waiting:
                self.metrics.trace_records_dropped.labels(write.record).inc()
            self._waiting.clear()
            self._bytes = 0
            self.metrics.trace_backlog_records.set(0)
        log.error(
            "trace store %s: %d trace records dropped at shutdown, the database still refuses writes (%s); "
            "their episodes' traces lack them",
            self._where,
            left,
            error,
        )

    # --- internals: callers hold the lock, but for _drain, which takes it ---

    def _add(self, write: TraceWrite) -> None:
        if self._bytes + write.size > self.limit_bytes:
            if not self._dropped:
                log.error(
                    "trace store %s: the backlog of unwritten trace records is full (%d records, %.1f MiB); "
                    "new records are dropped until the database takes writes again (raise "
                    "REGROW_SERVER_TRACE_BACKLOG_MIB to keep more)",
                    self._where,
                    len(self._waiting),
                    self._bytes / MIB,
                )
            self._dropped += 1
            self.metrics.trace_records_dropped.labels(write.record).inc()
            return
        self._waiting.append(write)
        self._bytes += write.size
        self.metrics.trace_backlog_records.set(len(self._waiting))

    def _fail(self, error: sqlite3.Error) -> None:
        if self._failing_since is not None:
            return
        self.metrics.trace_write_failures.inc()
        self._failing_since = time.monotonic()
        log.error(
            "trace store %s: writes fail (%s); steps still answer and their records wait in memory (up to %d MiB), "
            "retried every %g s: free disk space, or end what holds the database lock",
            self._where,
            error,
            self.limit_bytes // MIB,
            RETRY_INTERVAL_S,
        )
        self._retries.start()  # once; later failures find it running

    def _drop_rejected(self, rejected: list[tuple[TraceWrite, sqlite3.Error]]) -> None:
        for write, error in rejected:
            self.metrics.trace_records_dropped.labels(write.record).inc()
            log.error(
                "trace store %s: the database rejected a %s record of episode %s (%s); it is dropped",
                self._where,
                write.record,
                write.episode_id,
                error,
            )

    def _drain(self) -> sqlite3.Error | None:
        """Commit waiting writes, taking the lock for one batch at a time; the error that stopped it, if any."""
        while True:
            with self._lock:
                if not self._waiting:
                    return None
                error = self._commit_batch()
                if error is None and not self._waiting:
                    self._note_recovery()
            if error is not None:
                return error

    def _commit_batch(self) -> sqlite3.Error | None:
        batch = [self._waiting[i] for i in range(min(DRAIN_BATCH, len(self._waiting)))]
        try:
            self._drop_rejected(self._commit(batch, 1))
        except sqlite3.Error as error:
            return error
        for write in batch:
            self._waiting.popleft()
            self._bytes -= write.size
        self._written_late += len(batch)
        self.metrics.trace_backlog_records.set(len(self._waiting))
        return None

    def _note_recovery(self) -> None:
        if self._failing_since is None:
            return
        log.warning(
            "trace store %s: writes work again after %.1f s; %d waiting records written, %d dropped",
            self._where,
            time.monotonic() - self._failing_since,
            self._written_late,
            self._dropped,
        )
        self._failing_since, self._written_late, self._dropped = None, 0, 0
