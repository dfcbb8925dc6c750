"""Integration: two episodes played on a live `regrow serve`, exported, and replayed by `regrow replay`."""

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from regrow.cli import app as regrow_app
from tests.live_process import free_port, wait_healthy
from tests.replay.tool_caller import READ_CORE, train_tool_caller
from tests.task_fixture import DEMO_TASK_ID, build_demo_task_store
from trainer_client.channels.preference_pairs import read_pairs
from trainer_client.replay.action_key import action_key
from trainer_client.replay.replay_run import read_traces

pytestmark = [pytest.mark.docker, pytest.mark.train]

EPISODES = {
    "live-1": [{"tool": "list_dir", "args": {}}, {"tool": "submit", "args": {}}],
    "live-2": [
        {"tool": "run", "args": {"command": "python -m pytest -q"}},
        {"tool": "read_file", "args": {"path": "calc/ops.py"}},
        {"tool": "submit", "args": {}},
    ],
}


@pytest.fixture(scope="module")
def live_server(docker_backend, base_image, tmp_path_factory):
    """`regrow serve` on the demo task store; yields (URL, trace db), stopped with SIGTERM after the module."""
    work = tmp_path_factory.mktemp("live")
    store = build_demo_task_store(docker_backend, base_image, work / "tasks")
    port, db = free_port(), work / "serve.sqlite"
    env = {**os.environ, "REGROW_SERVER_WARM_POOL_PER_IMAGE": "0", "REGROW_SERVER_MAX_EPISODES": "4"}
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "regrow"),
            "serve",
            "--tasks",
            str(store),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--grpc-port",
            str(free_port()),
            "--traces",
            str(db),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        yield f"http://127.0.0.1:{port}", db
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def live_traces(live_server, tmp_path_factory) -> Path:
    """Play EPISODES on the live server and export its traces as JSONL."""
    url, db = live_server
    with httpx.Client(base_url=url, timeout=180) as http:
        for episode_id, actions in EPISODES.items():
            assert http.post("/reset", json={"task_id": DEMO_TASK_ID, "episode_id": episode_id}).status_code == 200
            for action in actions:
                answer = http.post("/step", json={"action": action, "episode_id": episode_id})
                assert answer.status_code == 200, answer.text
    out = tmp_path_factory.mktemp("export") / "traces.jsonl"
    exported = CliRunner().invoke(regrow_app, ["traces", "export", "--db", str(db), "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    return out


@pytest.fixture(scope="module")
def live_teacher_dir(live_traces, tiny_model_dir, tmp_path_factory) -> Path:
    """The read teacher, taught its reply in the live episodes' own contexts too: a tiny model's habit did not carry
    over to a live `run` step's observation, and its answers there did not parse."""
    from proto.transcript import format_tool_call, transcript

    contexts = [transcript(trace, before_step=step.index) for trace in read_traces(live_traces) for step in trace.steps]
    out = tmp_path_factory.mktemp("live-read-teacher")
    return train_tool_caller(tiny_model_dir, out, format_tool_call(READ_CORE), contexts=contexts)


@pytest.fixture(scope="module")
def live_teacher_served(live_teacher_dir, tmp_path_factory):
    from tests.openai_serve import transformers_serve

    with transformers_serve(live_teacher_dir, tmp_path_factory.mktemp("serve") / "serve.log") as base:
        yield f"{base}/v1", str(live_teacher_dir)


@pytest.fixture(scope="module")
def live_pairs(live_traces, live_teacher_dir, live_teacher_served, tiny_model_dir, tmp_path_factory) -> Path:
    """`regrow replay` of the live traces against a local HF teacher and a `transformers serve` teacher."""
    base_url, served_model = live_teacher_served
    work = tmp_path_factory.mktemp("replay")
    teachers = work / "teachers.yaml"
    teachers.write_text(
        "concurrency: 2\nmax_cost_usd: 1.0\nteachers:\n"
        f"  - {{name: local, kind: hf, path: '{live_teacher_dir}'}}\n"
        f"  - {{name: served, kind: openai, base_url: '{base_url}', model: '{served_model}',"
        " input_usd_per_mtok: 1.0, output_usd_per_mtok: 4.0}\n"
    )
    pairs_path = work / "pairs.jsonl"
    result = CliRunner().invoke(
        regrow_app,
        [
            "replay",
            str(live_traces),
            "--teachers",
            str(teachers),
            "--out",
            str(pairs_path),
            "--policy",
            str(tiny_model_dir),
        ],
    )
    assert result.exit_code == 0, result.output
    return pairs_path


def test_regrow_replay_turns_live_episodes_into_pairs_and_a_report(live_traces, live_pairs):
    report = json.loads(live_pairs.with_suffix(".report.json").read_text())
    pairs = read_pairs(live_pairs)
    traces = {trace.episode_id: trace for trace in read_traces(live_traces)}
    # every student turn differs from the teachers' read_file(mathlib/core.py)
    assert report["decisions"]["pair"] == 5 == len(pairs), json.dumps(report, indent=1)[:4000]
    assert {t["trace_id"]: t["pairs"] for t in report["traces"]} == {"live-1": 2, "live-2": 3}
    assert all(action_key(p.chosen) == action_key(READ_CORE) for p in pairs)
    assert [p.rejected.tool for p in pairs] == ["list_dir", "submit", "run", "read_file", "submit"]
    assert all(p.context[1].content == traces[p.trace_id].problem_statement for p in pairs)
    assert len(pairs[4].context) == 2 + 2 * 2  # system, task, then two earlier turns and their responses
    assert report["cost_usd"] > 0 and report["cost_usd"] == pytest.approx(report["teachers"]["served"]["cost_usd"])
    assert report["teachers"]["local"]["errors"] == {} and report["teachers"]["served"]["errors"] == {}
    assert report["step_latency"]["p95_s"] >= report["step_latency"]["p50_s"] > 0


def test_three_training_steps_with_all_three_channels_use_the_replay_pairs(
    live_server, live_pairs, tiny_model_dir, tmp_path
):
    from trainer_client.train.run import run_training
    from trainer_client.train.settings import TrainSettings

    url, _ = live_server
    settings = TrainSettings(
        env=url,
        model=str(tiny_model_dir),
        output_dir=tmp_path / "run",
        task_ids=[DEMO_TASK_ID],
        steps=3,
        group_size=2,
        groups_per_step=1,
        workers=2,
        max_turns=3,
        max_turn_tokens=32,
        max_completion_tokens=1024,
        learning_rate=1e-3,
        alpha_sdpo=1.0,
        pairs=live_pairs,
        beta_dpo=1.0,
        dpo_pairs_per_step=2,
        logger="none",
        device="cpu",
        save_steps=100,
        episode_timeout_s=600,
    )
    summary = run_training(settings)
    steps = [entry for entry in summary.log_history if "dpo/loss" in entry]
    assert summary.steps == 3 and len(steps) == 3
    for entry in steps:
        assert all(math.isfinite(entry[name]) for name in ("loss", "rlvr/loss", "sdpo/loss", "dpo/loss"))
        assert entry["dpo/pairs"] > 0
    assert summary.distilled_tokens > 0
    assert steps[0]["dpo/loss"] == pytest.approx(math.log(2), abs=1e-3)  # policy == reference before the first update
