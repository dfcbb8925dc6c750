"""A whole `regrow train` run on the scripted env: checkpoints, resume, and the tensorboard log."""

import pytest

pytest.importorskip("torch")

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
    from trainer_client.train.run import run_training

    readings = []
    settings = settings_for(scripted_env_url, tiny_policy_dir, tmp_path, steps=2).model_copy(
        update={"logger": "none", "save_steps": 10}
    )

    summary = run_training(settings, show_progress=readings.append)

    assert summary.steps == 2 and readings
    last = readings[-1]
    assert (last.step, last.steps, last.episodes_needed) == (2, 2, 4)
    assert last.episodes == summary.episodes >= 4 and last.turns >= last.episodes
    assert last.mean_reward is not None and 0.0 <= last.mean_reward <= 1.0
    assert [r.episodes for r in readings] == sorted(r.episodes for r in readings)  # it moves only forward
    assert "episodes" in last.line() and "step 2/2" in last.line()
