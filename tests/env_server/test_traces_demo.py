"""`regrow traces demo`: the demo task's own solution played through the live server, recorded as an agent's episode."""

import httpx
import pytest
from typer.testing import CliRunner

from regrow.cli import app
from tests.task_fixture import DEMO_TASK_ID


def test_the_demonstrator_plays_each_solution_as_tool_calls_and_the_grader_pays_it(server, demo_task_store):
    outcome = CliRunner().invoke(app, ["traces", "demo", "--tasks", str(demo_task_store), "--env", server.http_url])
    assert outcome.exit_code == 0, outcome.output
    assert "1 of 1 solutions earned 1.0" in outcome.output
    (episode,) = [
        e for e in httpx.get(f"{server.http_url}/episodes", timeout=30).json() if e["task_id"] == DEMO_TASK_ID
    ]
    steps = httpx.get(f"{server.http_url}/episodes/{episode['episode_id']}", timeout=30).json()["steps"]
    assert [step["action"]["tool"] for step in steps] == ["read_file", "edit_file", "run", "submit"]
    assert episode["reward"] == 1.0 and steps[2]["observation"]["exit_code"] == 0  # the tests pass before the submit


def test_a_store_without_tasks_is_refused_with_the_remedy(tmp_path):
    outcome = CliRunner().invoke(app, ["traces", "demo", "--tasks", str(tmp_path), "--env", "http://127.0.0.1:9"])
    assert outcome.exit_code == 1 and "regrow synth" in outcome.output


@pytest.mark.train
def test_sft_on_the_demonstrations_lowers_the_policys_loss_on_them(server, demo_task_store, tmp_path):
    """The warm start: the demonstrator's episodes, exported, fine-tune the tiny policy through TRL's SFTTrainer."""
    from env_server.traces.export import export_traces
    from proto.dataset_files import DatasetFormat
    from tests.trainer_client.tiny_policy import save_tiny_policy
    from trainer_client.train.sft import SftSettings, run_sft

    played = CliRunner().invoke(app, ["traces", "demo", "--tasks", str(demo_task_store), "--env", server.http_url])
    assert played.exit_code == 0, played.output
    exported = tmp_path / "demos.jsonl"
    export_traces(server.runtime.settings.trace_path(), exported, DatasetFormat.jsonl)
    policy = save_tiny_policy(tmp_path / "tiny")
    settings = SftSettings(
        traces=exported, model=str(policy), output_dir=tmp_path / "sft", epochs=20, learning_rate=3e-3
    )

    summary = run_sft(settings)

    assert summary.kept >= 1 and summary.below_reward >= 0 and summary.too_long == 0
    assert summary.loss_after < summary.loss_before * 0.8, summary
    assert (summary.final_model / "config.json").is_file()
