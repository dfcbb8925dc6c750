"""A step whose groups all scored alike leaves the weights and Adam's moments where the last real step put them."""

import copy
import dataclasses

import pytest
import torch
from transformers import TrainerCallback

from tests.trainer_client.conftest import play_scripts
from tests.trainer_client.test_trainer_step import SCRIPTS, build, config
from tests.trainer_client.tiny_policy import tiny_qwen2
from trainer_client.rollout.rows import trajectory_rows

pytestmark = pytest.mark.train


@pytest.fixture(scope="module")
def trajectories(scripted_env_url, tokenizer, episode_tokens):
    return play_scripts(scripted_env_url, tokenizer, episode_tokens, SCRIPTS)


class _WeightsAfterEachStep(TrainerCallback):
    def __init__(self):
        self.weights: list[dict[str, torch.Tensor]] = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.weights.append({name: p.detach().clone() for name, p in model.named_parameters()})


def _mixed_then_uniform(trajectories, episode_tokens):
    """The first step's group scored [1, 0, 1, 0]; every later step's group scored 0 four times."""
    calls = []

    def rollouts(prompts, trainer):
        played = trajectories[: len(prompts)]
        if calls:
            played = [dataclasses.replace(t, reward=0.0) for t in played]
        calls.append(len(prompts))
        return trajectory_rows(played, episode_tokens)

    return rollouts


def test_steps_without_a_gradient_leave_the_weights_where_adams_momentum_would_have_moved_them(
    tmp_path, tokenizer, trajectories, episode_tokens
):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    assert [t.reward for t in trajectories] == [1.0, 0.0, 1.0, 0.0]
    base = tiny_qwen2(tokenizer)
    seen = _WeightsAfterEachStep()
    trainer = build(
        RegrowGRPOTrainer,
        config(tmp_path, RegrowGRPOConfig, max_steps=3, learning_rate=1e-3, alpha_sdpo=0.0),  # AdamW, the default
        copy.deepcopy(base),
        tokenizer,
        trajectories,
        episode_tokens,
        callbacks=[seen],
    )
    trainer.rollout_func = _mixed_then_uniform(trajectories, episode_tokens)
    trainer.train()

    first, second, third = seen.weights
    assert any(not torch.equal(first[name], p) for name, p in base.named_parameters())  # the mixed group moved them
    for name in first:  # before, Adam's momentum moved every weight again at each empty step
        assert torch.equal(first[name], second[name]) and torch.equal(second[name], third[name]), name
    assert trainer.silent_steps.skipped == 2
    skipped = [e["optimizer/step_skipped"] for e in trainer.state.log_history if "optimizer/step_skipped" in e]
    assert skipped == [0.0, 1.0, 1.0]
    steps = {int(state["step"]) for state in trainer.optimizer.state.values() if "step" in state}
    assert steps == {1}  # the moments saw one step: the empty ones never reached them
