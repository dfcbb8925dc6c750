"""The dashboard's figures and the viewer's model, without an engine: rolling windows, SQL summaries, redaction."""

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from pydantic import SecretStr

from env_server.dashboard.access import COOKIE, PageAccess
from env_server.dashboard.episode_view import HIDDEN, Redactor, diff_lines, episode_view
from env_server.dashboard.trace_summaries import (
    REWARD_BINS,
    recent_episodes,
    reward_bin,
    reward_summary,
    task_pass_rates,
)
from env_server.observability.live_stats import LiveStats, percentile
from env_server.traces.store import TraceStore
from proto.actions import ToolCall
from proto.observations import CodingObservation, RewardDetails
from proto.observations import TestOutcome as Outcome  # not named Test*: pytest would try to collect it
from proto.traces import EpisodeTrace, StepTrace

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_percentile_interpolates_between_ranks_as_statistics_quantiles_does():
    values = [float(v) for v in range(100, 0, -1)]
    assert percentile(values, 0.5) == pytest.approx(50.5) and percentile(values, 0.95) == pytest.approx(95.05)
    assert percentile([3.0], 0.95) == 3.0 and percentile([], 0.5) is None


def test_live_stats_rates_latency_and_minutes_follow_the_clock():
    clock = Clock()
    stats = LiveStats(clock, window_s=600)
    for duration in (0.1, 0.2, 0.3, 0.4, 2.0):
        stats.record_step(duration)
    stats.record_end()
    clock.now += 90  # a minute and a half later
    stats.record_step(1.0)
    stats.record_end()
    stats.record_end()
    assert stats.latency(300) == pytest.approx((0.35, 1.75, 6))
    assert stats.latency(60) == (1.0, 1.0, 1)
    assert stats.episodes_per_minute(300) == pytest.approx(3 * 60 / 300)
    minutes = stats.minutes(3)
    assert [m.minute for m in minutes] == [2, 1, 0]
    assert [m.episodes for m in minutes] == [0, 1, 2] and [m.p95_s for m in minutes] == [None, pytest.approx(1.68), 1.0]
    clock.now += 700  # past the window: everything is forgotten
    assert stats.latency(300) == (None, None, 0) and stats.episodes_per_minute() == 0.0
    assert all(m.episodes == 0 for m in stats.minutes(30))


@pytest.mark.parametrize(
    ("reward", "label"), [(0.0, "0"), (0.05, "0-0.1"), (0.5, "0.5-0.6"), (0.99, "0.9-1"), (1.0, "1"), (-1.0, "0")]
)
def test_each_reward_falls_in_one_bin(reward, label):
    assert REWARD_BINS[reward_bin(reward)] == label


def details(reward: float, tampered: bool = False, refused: int = 0, error: str | None = None) -> RewardDetails:
    return RewardDetails(
        reward=reward,
        mode="fraction",
        f2p_passed=0,
        f2p_total=1,
        p2p_passed=0,
        p2p_total=0,
        tampered=tampered,
        tamper_reasons=["static_scan"] if tampered else [],
        refused=[{"path": f"tests/t{i}.py", "reason": "a test file"} for i in range(refused)],
        error=error,
    )


def record(store: TraceStore, episode_id: str, task_id: str, minute: int, steps: int, ending) -> None:
    started = T0 + timedelta(minutes=minute)
    store.start_episode(EpisodeTrace(episode_id=episode_id, task_id=task_id, problem_statement="p", started_at=started))
    for index in range(steps):
        action = ToolCall(tool="run", args={"command": "ls"})
        store.add_step(episode_id, StepTrace(index=index, action=action, observation=CodingObservation(),
                                             started_at=started, duration_s=0.1))  # fmt: skip
    if ending is not None:
        status, graded = ending
        store.end_episode(episode_id, status, started + timedelta(seconds=30), graded)


@pytest.fixture()
def store(tmp_path):
    traces = TraceStore(tmp_path / "traces.sqlite")
    record(traces, "e1", "easy", 0, 2, ("submitted", details(1.0)))
    record(traces, "e2", "easy", 1, 3, ("submitted", details(1.0)))
    record(traces, "h1", "hard", 2, 4, ("submitted", details(0.0, tampered=True)))
    record(traces, "h2", "hard", 3, 1, ("budget_exhausted", details(0.5, refused=2, error="boom")))
    record(traces, "a1", "hard", 4, 0, ("aborted", None))
    record(traces, "r1", "new", 5, 1, None)
    yield traces
    traces.close()


def test_reward_summary_counts_bins_tampering_and_statuses(store):
    summary = reward_summary(store)
    assert summary.counts[0] == 1 and summary.counts[-1] == 2 and summary.counts[REWARD_BINS.index("0.5-0.6")] == 1
    assert summary.graded == 4 and summary.tampered == 1
    assert summary.by_status == {"submitted": 3, "budget_exhausted": 1, "aborted": 1, "running": 1}


def test_recent_episodes_are_newest_first_with_steps_durations_and_flags(store):
    recent = recent_episodes(store, limit=5, now=T0 + timedelta(minutes=5, seconds=10))
    assert [e.episode_id for e in recent] == ["r1", "a1", "h2", "h1", "e2"]
    by_id = {e.episode_id: e for e in recent}
    assert by_id["r1"].status == "running" and by_id["r1"].duration_s == 10.0 and by_id["r1"].steps == 1
    assert by_id["h1"].flags == ["tampered: static_scan"] and by_id["h1"].steps == 4
    assert by_id["h2"].flags == ["2 edit(s) refused", "grading error"] and by_id["h2"].duration_s == 30.0
    assert by_id["a1"].flags == ["aborted"] and by_id["e2"].flags == []


def test_task_pass_rates_put_the_hardest_first(store):
    rates, left_out = task_pass_rates(store)
    assert [r.task_id for r in rates] == ["hard", "easy", "new"] and left_out == 0
    hard, easy, new = rates
    assert (hard.episodes, hard.graded, hard.passed, hard.tampered, hard.pass_rate) == (3, 2, 0, 1, 0.0)
    assert hard.mean_reward == pytest.approx(0.25) and easy.pass_rate == 1.0
    assert new.graded == 0 and new.pass_rate is None and new.mean_reward is None
    assert task_pass_rates(store, limit=1)[1] == 2


def test_diff_lines_are_sorted_into_kinds():
    text = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n same\n\\ No newline at end of file\n"
    assert [line.kind for line in diff_lines(text)] == ["file", "file", "hunk", "del", "add", "same", "note"]


def graded_trace() -> EpisodeTrace:
    tests = [
        Outcome(nodeid="tests/test_ops.py::test_clamp", outcome="failed", group="FAIL_TO_PASS"),
        Outcome(nodeid="hidden::calc.ops.clamp #0", outcome="failed", group="HIDDEN"),
    ]
    graded = details(0.0).model_copy(update={"tests": tests, "hidden_total": 1, "diff": "+++ b/x.py\n+y\n"})
    steps = [
        StepTrace(
            index=0,
            action=ToolCall(tool="run", args={"command": "pytest"}),
            observation=CodingObservation(output="line\n" * 100, exit_code=1),
            started_at=T0,
            duration_s=1.0,
        ),
        StepTrace(
            index=1,
            action=ToolCall(tool="submit", args={}),
            observation=CodingObservation(feedback="2 of 2 tests fail: hidden::calc.ops.clamp #0 (failed)", done=True),
            started_at=T0,
            duration_s=2.0,
        ),
    ]
    return EpisodeTrace(
        episode_id="e", task_id="t", problem_statement="p", steps=steps, status="submitted", reward=0.0,
        reward_details=graded, started_at=T0, ended_at=T0 + timedelta(seconds=3),
    )  # fmt: skip


def test_the_viewer_hides_hidden_checks_and_the_solution_unless_asked():
    hidden = episode_view(graded_trace(), "--- a/x.py\n+++ b/x.py\n", show_solutions=False)
    assert [row.group for row in hidden.tests] == ["FAIL_TO_PASS"] and hidden.hidden_total == 1
    assert hidden.steps[1].feedback == f"2 of 2 tests fail: {HIDDEN} (failed)" and hidden.solution == []
    assert hidden.steps[0].folded and hidden.steps[0].exit_code == 1 and hidden.duration_s == 3.0
    shown = episode_view(graded_trace(), "--- a/x.py\n+++ b/x.py\n", show_solutions=True)
    assert [row.group for row in shown.tests] == ["FAIL_TO_PASS", "HIDDEN"]
    assert "hidden::calc.ops.clamp #0" in (shown.steps[1].feedback or "") and len(shown.solution) == 2
    assert [line.kind for line in shown.diff] == ["file", "add"]


def test_the_redactor_takes_the_longest_name_first():
    redact = Redactor(["hidden::a", "hidden::a #1"])
    assert redact("hidden::a #1 and hidden::a") == f"{HIDDEN} and {HIDDEN}"


def signed_in_app(token: str | None) -> TestClient:
    access = PageAccess(SecretStr(token) if token else None)
    app = FastAPI()

    @app.get("/page")
    def page(request: Request):
        if (given := request.query_params.get("token")) and access.token_matches(given):
            return access.sign_in(request)
        return {"allowed": access.allowed(request)}

    return TestClient(app, follow_redirects=False)


def test_page_access_takes_a_bearer_header_or_the_signed_cookie_and_nothing_else():
    client = signed_in_app("s3cret")
    assert client.get("/page").json() == {"allowed": False}
    assert client.get("/page", headers={"Authorization": "Bearer s3cret"}).json() == {"allowed": True}
    assert client.get("/page", headers={"Authorization": "Bearer wrong"}).json() == {"allowed": False}
    client.cookies.set(COOKIE, "s3cret")  # the token itself is not the cookie
    assert client.get("/page").json() == {"allowed": False}
    client.cookies.clear()
    redirect = client.get("/page", params={"token": "s3cret", "keep": "a b"})
    assert redirect.status_code == 303 and redirect.headers["location"] == "/page?keep=a+b"
    assert client.get("/page").json() == {"allowed": True}
    assert signed_in_app(None).get("/page").json() == {"allowed": True}


def test_a_database_from_before_the_tampered_column_gets_it_filled(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as old:
        old.execute(
            "CREATE TABLE episodes (episode_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, problem_statement TEXT NOT"
            " NULL, tools TEXT NOT NULL, status TEXT NOT NULL, reward REAL, reward_details TEXT, started_at TEXT NOT"
            " NULL, ended_at TEXT)"
        )
        for episode_id, forged in (("old-forged", True), ("old-honest", False)):
            old.execute(
                "INSERT INTO episodes VALUES (?, 't', 'p', '[]', 'submitted', 0.0, ?, ?, ?)",
                (episode_id, details(0.0, tampered=forged).model_dump_json(), T0.isoformat(), T0.isoformat()),
            )
    store = TraceStore(path)
    try:
        assert reward_summary(store).tampered == 1
        assert store.get_episode("old-forged").reward_details.tampered
        assert {e.episode_id: e.flags for e in recent_episodes(store)}["old-forged"] == ["tampered: static_scan"]
    finally:
        store.close()


def test_a_snapshot_keeps_the_live_figures_when_the_trace_database_cannot_be_read(tmp_path):
    from types import SimpleNamespace

    from env_server.dashboard.snapshot import take_snapshot
    from proto.health import ServerHealth

    traces = TraceStore(tmp_path / "traces.sqlite")
    traces.close()  # every read now raises sqlite3.ProgrammingError
    live = LiveStats()
    live.record_step(0.25)
    runtime = SimpleNamespace(
        live_stats=live,
        traces=traces,
        server_id="s1",
        health=lambda: ServerHealth(status="healthy", free_slots=3, max_episodes=4, active_episodes=1),
        sandboxes=SimpleNamespace(pools={}),
    )
    snapshot = take_snapshot(runtime)
    assert snapshot.trace_error and "could not be read" in snapshot.trace_error
    assert snapshot.latency_p50_s == 0.25 and snapshot.health.active_episodes == 1
    assert snapshot.recent == [] and snapshot.rewards.graded == 0
