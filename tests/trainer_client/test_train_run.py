"""A whole `regrow train` run on the scripted env: checkpoints, resume, and the tensorboard log."""

import pytest

from tests.trainer_client.tiny_policy import save_tiny_policy, tiny_run_settings

pytestmark = pytest.mark.train


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-policy")
    return save_tiny_policy(folder)


def settings_for(url, model, output_dir, steps):
    return tiny_run_settings(
        url,
        model,
        output_dir,
        "calc",
        steps=steps,
        max_turns=2,
        max_turn_tokens=24,
        max_completion_tokens=512,
        alpha_sdpo=0.5,
        sdpo_teacher="ema",
        logger="tensorboard",
        save_steps=1,
        episode_timeout_s=300,
    )


def test_run_saves_checkpoints_and_resumes_from_the_last_one(scripted_env_url, tiny_policy_dir, tmp_path):
    from trainer_client.train.run import last_checkpoint, run_training

    first = run_training(settings_for(scripted_env_url, tiny_policy_dir, tmp_path, steps=1))
    assert first.steps == 1 and last_checkpoint(tmp_path).endswith("checkpoint-1")

    second = run_training(settings_for(scripted_env_url, tiny_policy_dir, tmp_path, steps=2))

    assert second.steps == 2 and last_checkpoint(tmp_path).endswith("checkpoint-2")
    assert [entry["step"] for entry in second.log_history] == [
        1,
        2,
    ]  # step 1 restored from the checkpoint, not retrained
    assert second.curves == tmp_path / "tensorboard"
    # TensorBoard, in the folder named at the start, has each channel's loss, rewards, pass rate, clipping,
    # episode length and staleness, step by step.
    wanted = {"loss", "rlvr/loss", "sdpo/loss", "reward", "rollout/pass_rate", "clip_ratio/region_mean"}
    wanted |= {"completions/mean_length", "rollout/staleness_mean", "rollout/episode_retries"}
    assert {f"train/{tag}" for tag in wanted} <= _scalar_tags(second.curves)
    assert (second.final_model / "config.json").is_file()


def _scalar_tags(folder) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for events in folder.glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    return tags


def test_a_run_shows_its_rollouts_while_it_collects_them(scripted_env_url, tiny_policy_dir, tmp_path):
    """With gradient checkpointing on, too: the in-process sampler keeps its KV cache."""
    from trainer_client.train.run import run_training

    readings = []
    settings = settings_for(scripted_env_url, tiny_policy_dir, tmp_path, steps=2).model_copy(
        update={"logger": "none", "save_steps": 10, "gradient_checkpointing": True}
    )

    summary = run_training(settings, show_progress=readings.append)

    assert summary.steps == 2 and readings
    last = readings[-1]
    assert (last.step, last.steps, last.episodes_needed) == (2, 2, 4)
    assert last.episodes == summary.episodes >= 4 and last.turns >= last.episodes
    assert last.mean_reward is not None and 0.0 <= last.mean_reward <= 1.0
    assert [r.episodes for r in readings] == sorted(r.episodes for r in readings)  # it moves only forward
    assert "episodes" in last.line() and "step 2/2" in last.line()


def test_turns_and_tokens_count_as_the_policy_writes_them_not_when_episodes_end(
    scripted_env_url, tiny_policy_dir, tmp_path
):
    from trainer_client.train.run import run_training

    readings = []
    settings = settings_for(scripted_env_url, tiny_policy_dir, tmp_path, steps=1).model_copy(
        update={"logger": "none", "save_steps": 10}
    )

    summary = run_training(settings, show_progress=readings.append)

    last = readings[-1]
    # every turn of every episode played, those of a group still in play when the step ended too
    assert last.turns >= summary.episodes and last.tokens >= summary.policy_tokens > 0
    assert "| tokens " in last.line()


def test_regrow_train_into_a_log_prints_plain_progress_lines_from_the_start(
    scripted_env_url, tiny_policy_dir, tmp_path
):
    from typer.testing import CliRunner

    from regrow.cli import app

    command = [
        "train",
        "--env",
        scripted_env_url,
        "--model",
        str(tiny_policy_dir),
        "--task-ids",
        "calc",
        "--steps",
        "1",
    ]
    options = ["--group-size", "2", "--groups-per-step", "1", "--workers", "2", "--max-turns", "2"]
    options += ["--max-turn-tokens", "24", "--max-completion-tokens", "512", "--device", "cpu", "--logger", "none"]
    options += ["--progress-interval-s", "0.01", "--output-dir", str(tmp_path / "run")]

    result = CliRunner().invoke(app, [*command, *options])  # its stderr is no terminal, as a log file is not

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "starting: loading the policy and reaching the env" in lines[0]  # the first sign of life, before torch loads
    progress = [line for line in lines if "| episodes " in line]
    unstamped = [line for line in progress if line[:8].count(":") != 2]
    assert progress and unstamped == [], result.output  # each stamped HH:MM:SS
    assert any("step 1/1" in line for line in progress)
    assert "trained 1 steps" in result.output


def test_plain_progress_prints_at_once_then_at_most_once_an_interval():
    import io

    from rich.console import Console

    from trainer_client.cli import PlainProgress

    out, now = io.StringIO(), [100.0]
    lines = PlainProgress(Console(file=out, width=200), interval_s=10, clock=lambda: now[0])
    lines("first")
    now[0] += 5
    lines("too soon")
    now[0] += 6
    lines("third")

    printed = out.getvalue().splitlines()
    assert [line.split(" ", 1)[1] for line in printed] == ["first", "third"]
