"""A locked or full trace database: steps still answer, records wait in order and land later, or are counted dropped."""

import logging
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from env_server.observability.metrics import ServerMetrics
from env_server.traces import backlog
from env_server.traces.store import TraceStore
from proto.actions import ToolCall
from proto.observations import CodingObservation
from proto.traces import EpisodeTrace, StepTrace

# What the old store did under a lock: wait 5 s, then fail the step. Far above the 0.3 s of three 0.1 s attempts.
STEP_WRITE_LIMIT_S = 2.0
# Generous for a loaded machine: the backlog retries once a second.
LANDING_DEADLINE_S = 30.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def episode(episode_id: str, minute: int = 0) -> EpisodeTrace:
    return EpisodeTrace(
        episode_id=episode_id, task_id="demo", problem_statement="fix it", started_at=T0 + timedelta(minutes=minute)
    )


def step(index: int, output_bytes: int = 100) -> StepTrace:
    return StepTrace(
        index=index,
        action=ToolCall(tool="run", args={"command": f"echo {index}"}),
        observation=CodingObservation(output="x" * output_bytes),
        started_at=T0,
        duration_s=0.01,
    )


def metric(metrics: ServerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, f"{name}{labels} is not exported"
    return value


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + LANDING_DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {LANDING_DEADLINE_S:g}s: {what}"
        time.sleep(0.05)


def stored_steps(path: Path, episode_id: str) -> list[int]:
    """The step indexes on disk, read by a connection of its own."""
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT idx FROM steps WHERE episode_id = ? ORDER BY rowid", (episode_id,))
        return [idx for (idx,) in rows]


def stored_status(path: Path, episode_id: str) -> str | None:
    with closing(sqlite3.connect(path)) as db:
        row = db.execute("SELECT status FROM episodes WHERE episode_id = ?", (episode_id,)).fetchone()
    return row[0] if row else None


def timed_steps(store: TraceStore, episode_id: str, indexes: range, output_bytes: int = 100) -> list[float]:
    """Record steps as a server step does; the seconds each write held the step up."""
    durations = []
    for index in indexes:
        started = time.monotonic()
        store.add_step(episode_id, step(index, output_bytes))
        durations.append(time.monotonic() - started)
    return durations


def failure_logs(caplog: pytest.LogCaptureFixture, words: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "env_server.traces.backlog" and words in r.getMessage()]


def open_store(path: Path, backlog_bytes: int = 64 * 1024 * 1024) -> tuple[TraceStore, ServerMetrics]:
    store, metrics = TraceStore(path), ServerMetrics()
    store.report_to(metrics, backlog_bytes=backlog_bytes)
    return store, metrics


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root); unmounted after the test even when it failed."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mount_point)], check=True)  # a store left open in a failed test


def fill(disk: Path, db_path: Path) -> Path:
    """Fill `disk` to its last byte, after moving the WAL into the database so that every next write needs space."""
    with closing(sqlite3.connect(db_path)) as db:
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    assert busy == 0, "the WAL could not be emptied, so the next writes might still fit in it"
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as sink:
        for chunk in (64 * 1024, 4096, 1):
            try:
                while True:
                    sink.write(b"\0" * chunk)
            except OSError:
                pass
    return filler


def test_a_locked_database_delays_the_records_but_not_the_steps(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, "env_server.traces.backlog")
    monkeypatch.setattr(backlog, "RETRY_INTERVAL_S", 0.25)  # a few retries in a second, not in 2.5
    path = tmp_path / "traces.sqlite"
    store, metrics = open_store(path)
    store.start_episode(episode("before", minute=0))
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        durations = timed_steps(store, "before", range(5))
        store.start_episode(episode("during", minute=1))
        durations += timed_steps(store, "during", range(3))
        store.end_episode("before", "aborted", T0 + timedelta(minutes=2), None)

        assert max(durations) < STEP_WRITE_LIMIT_S, f"a step waited {max(durations):.2f}s on the trace lock"
        assert metric(metrics, "regrow_trace_write_failures_total") == 1
        assert metric(metrics, "regrow_trace_backlog_records") == 10
        # The waiting records are already served to readers.
        assert [s.index for s in store.get_episode("before").steps] == [0, 1, 2, 3, 4]
        assert [s.index for s in store.get_episode("during").steps] == [0, 1, 2]
        assert [e.episode_id for e in store.list_episodes()] == ["during", "before"]
        assert [e.episode_id for e in store.list_episodes(status="aborted")] == ["before"]
        assert [e.episode_id for e in store.list_episodes(limit=1, offset=1)] == ["before"]
        time.sleep(0.8)  # the lock outlives a few retries, which must not be logged again
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    wait_until(lambda: metric(metrics, "regrow_trace_backlog_records") == 0, "the backlog drained")
    assert stored_steps(path, "before") == [0, 1, 2, 3, 4]
    assert stored_steps(path, "during") == [0, 1, 2]
    assert stored_status(path, "before") == "aborted"
    assert metric(metrics, "regrow_trace_write_failures_total") == 1
    assert metric(metrics, "regrow_trace_records_dropped_total", record="step") == 0
    assert len(failure_logs(caplog, "writes fail")) == 1
    assert len(failure_logs(caplog, "writes work again")) == 1
    store.close()


def test_a_full_disk_keeps_steps_answering_and_writes_their_records_once_space_is_freed(tiny_disk, caplog):
    caplog.set_level(logging.INFO, "env_server.traces.backlog")
    path = tiny_disk / "traces.sqlite"
    store, metrics = open_store(path)
    try:
        store.start_episode(episode("e"))
        filler = fill(tiny_disk, path)
        durations = timed_steps(store, "e", range(20), output_bytes=8 * 1024)

        assert max(durations) < STEP_WRITE_LIMIT_S
        assert metric(metrics, "regrow_trace_write_failures_total") == 1
        assert metric(metrics, "regrow_trace_backlog_records") == 20
        assert "full" in failure_logs(caplog, "writes fail")[0].getMessage()
        filler.unlink()
        wait_until(lambda: metric(metrics, "regrow_trace_backlog_records") == 0, "the backlog drained")
        assert stored_steps(path, "e") == list(range(20))
        assert metric(metrics, "regrow_trace_records_dropped_total", record="step") == 0
    finally:
        store.close()


def test_records_beyond_the_backlog_bound_are_counted_as_dropped(tiny_disk, caplog):
    caplog.set_level(logging.INFO, "env_server.traces.backlog")
    path = tiny_disk / "traces.sqlite"
    store, metrics = open_store(path, backlog_bytes=64 * 1024)
    try:
        store.start_episode(episode("e"))
        filler = fill(tiny_disk, path)
        durations = timed_steps(store, "e", range(30), output_bytes=8 * 1024)

        assert max(durations) < STEP_WRITE_LIMIT_S
        dropped = metric(metrics, "regrow_trace_records_dropped_total", record="step")
        kept = metric(metrics, "regrow_trace_backlog_records")
        assert dropped > 0 and kept > 0 and dropped + kept == 30
        assert len(failure_logs(caplog, "backlog of unwritten trace records is full")) == 1
        filler.unlink()
        wait_until(lambda: metric(metrics, "regrow_trace_backlog_records") == 0, "the backlog drained")
        # What was kept is the oldest, in order, with no gap.
        assert stored_steps(path, "e") == list(range(int(kept)))
        recovery = failure_logs(caplog, "writes work again")[0].getMessage()
        assert f"{kept:.0f} waiting records written, {dropped:.0f} dropped" in recovery
    finally:
        store.close()


def test_shutdown_writes_the_backlog_once_more(tmp_path):
    path = tmp_path / "traces.sqlite"
    store, metrics = open_store(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    store.start_episode(episode("e"))
    timed_steps(store, "e", range(3))
    holder.execute("ROLLBACK")
    holder.close()
    store.close()  # at once, before the once-a-second retry has to come round
    assert stored_steps(path, "e") == [0, 1, 2]
    assert metric(metrics, "regrow_trace_backlog_records") == 0


def test_records_still_refused_at_shutdown_are_counted_as_dropped_and_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO, "env_server.traces.backlog")
    path = tmp_path / "traces.sqlite"
    store, metrics = open_store(path)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        store.start_episode(episode("e"))
        timed_steps(store, "e", range(3))
        store.end_episode("e", "aborted", T0, None)
        store.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert metric(metrics, "regrow_trace_records_dropped_total", record="episode") == 1
    assert metric(metrics, "regrow_trace_records_dropped_total", record="step") == 3
    assert metric(metrics, "regrow_trace_records_dropped_total", record="episode_end") == 1
    assert metric(metrics, "regrow_trace_backlog_records") == 0
    assert "5 trace records dropped at shutdown" in failure_logs(caplog, "dropped at shutdown")[0].getMessage()
    assert stored_status(path, "e") is None


@pytest.mark.docker
def test_a_served_episode_answers_every_request_while_the_trace_database_is_locked(server):
    import httpx

    from tests.task_fixture import DEMO_TASK_ID

    metrics, path = server.runtime.metrics, server.runtime.traces.path
    failures_before = metric(metrics, "regrow_trace_write_failures_total")
    holder = sqlite3.connect(path, isolation_level=None)
    with httpx.Client(base_url=server.http_url, timeout=300) as http:
        try:
            holder.execute("BEGIN EXCLUSIVE")
            reset = http.post("/reset", json={"task_id": DEMO_TASK_ID})
            assert reset.status_code == 200, reset.text
            episode_id = reset.json()["observation"]["metadata"]["episode_id"]
            for action in ({"tool": "no_such_tool", "args": {}}, {"tool": "run", "args": {"command": "ls"}}):
                answer = http.post("/step", json={"episode_id": episode_id, "action": action})
                assert answer.status_code == 200, answer.text
            served = EpisodeTrace.model_validate(http.get(f"/episodes/{episode_id}").json())
            assert [s.action.tool for s in served.steps] == ["no_such_tool", "run"]
            assert "regrow_trace_backlog_records 3.0" in http.get("/metrics").text
            assert metric(metrics, "regrow_trace_write_failures_total") == failures_before + 1
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    wait_until(lambda: metric(metrics, "regrow_trace_backlog_records") == 0, "the backlog drained")
    assert stored_steps(path, episode_id) == [0, 1]
