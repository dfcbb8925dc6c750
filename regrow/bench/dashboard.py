"""`regrow bench dashboard`: what one dashboard refresh costs on a large trace database and a busy server.

The database is filled in one transaction with synthetic episodes (a tenth forged, rewards spread over [0, 1]); the
rolling windows hold a full 50 000 steps. No engine is needed.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from env_server.dashboard.trace_summaries import recent_episodes, reward_summary, task_pass_rates
from env_server.observability.live_stats import MAX_STEPS, LiveStats
from env_server.traces.store import TraceStore
from proto.actions import ToolCall
from proto.observations import CodingObservation, RewardDetails
from regrow.bench.load_stats import latency_ms

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _fill(path: Path, episodes: int, tasks: int, steps: int, seed: int) -> None:
    TraceStore(path).close()  # the schema, as the server makes it
    rng = random.Random(seed)
    action = ToolCall(tool="run", args={"command": "pytest -q"}).model_dump_json()
    observation = CodingObservation(output="." * 400, exit_code=0).model_dump_json()
    with sqlite3.connect(path) as db:
        for number in range(episodes):
            episode_id, started = f"e{number:08d}", T0 + timedelta(seconds=number)
            forged = rng.random() < 0.1
            reward = 0.0 if forged else rng.choice([0.0, 0.25, 0.5, 1.0, 1.0])
            details = RewardDetails(
                reward=reward, mode="fraction", f2p_passed=0, f2p_total=4, p2p_passed=0, p2p_total=8,
                tampered=forged, tamper_reasons=["static_scan"] if forged else [], diff="+x\n" * 40,
            )  # fmt: skip
            db.execute(
                "INSERT INTO episodes (episode_id, task_id, problem_statement, tools, status, reward, reward_details,"
                " started_at, ended_at, tampered) VALUES (?, ?, 'fix it', '[]', 'submitted', ?, ?, ?, ?, ?)",
                (episode_id, f"task-{number % tasks:04d}", reward, details.model_dump_json(), started.isoformat(),
                 (started + timedelta(seconds=30)).isoformat(), int(forged)),
            )  # fmt: skip
            db.executemany(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?, 0.05)",
                [(episode_id, index, action, observation, started.isoformat()) for index in range(steps)],
            )


def _timed(call: Callable[[], object], repetitions: int) -> dict[str, float | int]:
    samples = []
    for _ in range(repetitions):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return latency_ms(samples)


def run_dashboard_bench(episodes: int, tasks: int, steps: int, repetitions: int, seed: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="regrow-dashboard-bench-") as folder:
        path = Path(folder) / "traces.sqlite"
        started = time.perf_counter()
        _fill(path, episodes, tasks, steps, seed)
        filled_s = time.perf_counter() - started
        store = TraceStore(path)
        try:
            parts = {
                "reward_summary": _timed(lambda: reward_summary(store), repetitions),
                "recent_episodes": _timed(lambda: recent_episodes(store), repetitions),
                "task_pass_rates": _timed(lambda: task_pass_rates(store), repetitions),
            }
        finally:
            store.close()
        size_mib = path.stat().st_size / 2**20
    live = LiveStats()
    for number in range(MAX_STEPS):
        live.record_step(0.01 + (number % 100) / 100)
    for _ in range(1000):
        live.record_end()
    parts["live_latency"] = _timed(lambda: live.latency(), repetitions)
    parts["live_minutes"] = _timed(lambda: live.minutes(30), repetitions)
    snapshot_ms = sum(part["p50_ms"] for part in parts.values())
    return {
        "episodes": episodes,
        "tasks": tasks,
        "steps": episodes * steps,
        "database_mib": round(size_mib, 1),
        "fill_s": round(filled_s, 1),
        "parts": parts,
        "snapshot_p50_ms": round(snapshot_ms, 2),
    }
