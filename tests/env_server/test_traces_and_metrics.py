"""Traces in SQLite behind /episodes and the export; Prometheus /metrics; one JSON log line per event."""

import json
import logging
import time

import httpx
import pyarrow.parquet as pq
import pytest
from openenv.core.generic_client import GenericEnvClient
from typer.testing import CliRunner

from proto.traces import EpisodeTrace
from regrow.cli import app as regrow_app
from tests.env_server.dashboard_support import FORGED_INIT
from tests.support.metric_samples import metric_samples, sample
from tests.task_fixture import DEMO_TASK_ID, MEMORY_IMAGE, ORIGINAL_OPS

# Package code that makes every test pass without running it: a forgery the grader must flag.


@pytest.fixture(scope="module")
def played(memory_server):
    """Three finished episodes: one solved, one empty submission, one forged; returns their ids."""
    ids = []
    for content in (ORIGINAL_OPS, None, "forged"):
        with GenericEnvClient(base_url=memory_server.http_url).sync() as env:
            ids.append(env.reset(task_id=DEMO_TASK_ID).observation["metadata"]["episode_id"])
            env.step({"tool": "run", "args": {"command": "ls"}})
            if content == "forged":
                env.step({"tool": "write_file", "args": {"path": "calc/__init__.py", "content": FORGED_INIT}})
            elif content:
                env.step({"tool": "write_file", "args": {"path": "calc/ops.py", "content": content}})
            env.step({"tool": "submit", "args": {}})
    return ids


def test_episode_trace_holds_every_step_and_the_reward(memory_server, played):
    with httpx.Client(base_url=memory_server.http_url) as http:
        trace = EpisodeTrace.model_validate(http.get(f"/episodes/{played[0]}").json())
    assert trace.task_id == DEMO_TASK_ID and trace.status == "submitted" and trace.reward == 1.0
    assert [step.action.tool for step in trace.steps] == ["run", "write_file", "submit"]
    assert "calc" in trace.steps[0].observation.output and trace.steps[0].duration_s > 0
    assert trace.reward_details.f2p_passed == 3 and trace.ended_at is not None


def test_a_forged_submission_is_flagged_in_the_trace_the_list_and_the_metrics(memory_server, played):
    with httpx.Client(base_url=memory_server.http_url) as http:
        trace = EpisodeTrace.model_validate(http.get(f"/episodes/{played[2]}").json())
        listed = {e["episode_id"]: e for e in http.get("/episodes", params={"task_id": DEMO_TASK_ID}).json()}
        text = http.get("/metrics").text
    details = trace.reward_details
    assert trace.reward == 0.0 and details.tampered and "check_records_forged" in details.tamper_reasons
    assert any("_pytest" in flag for flag in details.tamper_flags)
    assert "forged" in trace.steps[-1].observation.feedback
    assert listed[played[2]]["reward_details"]["tampered"] is True
    assert listed[played[0]]["reward_details"]["tampered"] is False
    assert sample(text, "regrow_reward_tampered_total", reason="check_records_forged") >= 1


def test_episode_list_filters_by_task_status_and_reward(memory_server, played):
    with httpx.Client(base_url=memory_server.http_url) as http:
        solved = http.get("/episodes", params={"task_id": DEMO_TASK_ID, "min_reward": 1.0}).json()
        assert played[0] in {e["episode_id"] for e in solved} and played[1] not in {e["episode_id"] for e in solved}
        assert http.get("/episodes", params={"task_id": "other"}).json() == []
        assert http.get("/episodes", params={"status": "bogus"}).status_code == 422
        assert http.get("/episodes/no-such-episode").status_code == 404


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_traces_export_writes_every_episode(memory_server, played, tmp_path, fmt):
    out = tmp_path / f"traces.{fmt}"
    result = CliRunner().invoke(
        regrow_app,
        ["traces", "export", "--db", str(memory_server.runtime.traces.path), "--out", str(out), "--format", fmt],
    )
    assert result.exit_code == 0, result.output
    if fmt == "jsonl":
        traces = {t.episode_id: t for t in map(EpisodeTrace.model_validate_json, out.read_text().splitlines())}
        assert set(played) <= set(traces) and len(traces[played[0]].steps) == 3
    else:
        rows = {row["episode_id"]: row for row in pq.read_table(out).to_pylist()}
        assert rows[played[0]]["reward"] == 1.0 and [s["tool_name"] for s in rows[played[0]]["tool_trace"]] == [
            "run",
            "write_file",
            "submit",
        ]


def test_metrics_report_episodes_latency_rewards_pool_and_failures(memory_server, played):
    with httpx.Client(base_url=memory_server.http_url) as http:
        text = http.get("/metrics").text
    assert sample(text, "regrow_active_episodes") is not None
    assert sample(text, "regrow_episodes_total", status="submitted") >= 1
    assert sample(text, "regrow_step_seconds_bucket", le="0.5", tool="run") is not None
    assert sample(text, "regrow_reward_count") >= 1 and sample(text, "regrow_reward_bucket", le="1.0") is not None
    ready = [labels for (name, labels) in metric_samples(text) if name == "regrow_warm_pool_ready"]
    assert len(ready) == 1 and ("image", MEMORY_IMAGE) in ready[0]  # a series per pool key, not per image
    assert any(key == "pool" for key, _ in ready[0])
    assert "regrow_sandbox_failures_total" in text or "# HELP regrow_sandbox_failures_total" in text


def test_an_events_fields_reach_the_json_line_as_given_and_a_plain_handler_reads_words(caplog):
    """Before, the fields went into the message as JSON text and the JSON formatter parsed them back out: a plain
    handler printed that JSON, and a field's type was whatever the round trip left."""
    from env_server.observability.event_log import JsonLineFormatter, log_event

    with caplog.at_level(logging.INFO, logger="regrow.events"):
        log_event("episode.step", episode_id="e1", tool="run", took_s=0.25, error=None)
    record = caplog.records[-1]
    assert record.getMessage() == "episode.step episode_id=e1 tool=run took_s=0.25"
    line = json.loads(JsonLineFormatter().format(record))
    assert {k: line[k] for k in ("event", "episode_id", "tool", "took_s", "error")} == {
        "event": "episode.step", "episode_id": "e1", "tool": "run", "took_s": 0.25, "error": None,
    }  # fmt: skip


def test_events_are_logged_one_json_line_each_with_the_episode_id(memory_server, caplog):
    server = memory_server  # the wire alone: no grading, no engine
    with caplog.at_level(logging.INFO, logger="regrow.events"):
        with GenericEnvClient(base_url=server.http_url).sync() as env:
            episode_id = env.reset(task_id=DEMO_TASK_ID).observation["metadata"]["episode_id"]
            env.step({"tool": "run", "args": {"command": "true"}})
        deadline = time.monotonic() + 30  # the server sees the disconnect on its own schedule
        while time.monotonic() < deadline and not events_of(caplog, episode_id, "episode.abort"):
            time.sleep(0.1)
    mine = events_of(caplog, episode_id)
    assert [e["event"] for e in mine][:2] == ["episode.start", "episode.step"]
    assert events_of(caplog, episode_id, "episode.abort")  # the client closed without submitting


def events_of(caplog, episode_id, event=None):
    events = [r.regrow_event for r in caplog.records if r.name == "regrow.events"]
    return [e for e in events if e["episode_id"] == episode_id and event in (None, e["event"])]
