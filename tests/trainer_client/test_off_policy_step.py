"""The trainer step off-policy and on one scale: the sampler's logprobs as PPO's old ones, SDPO summed like Dr.GRPO,
unscored tokens dropped, and each channel's gradient norm logged."""

import copy
import math

import pytest
import torch

from tests.trainer_client import test_trainer_step
from tests.trainer_client.tiny_policy import tiny_qwen2
from trainer_client.rollout.agent_loop import Trajectory
from trainer_client.rollout.rows import EPISODE_SLOT, env_reward, episode_slots, trajectory_rows

pytestmark = pytest.mark.train

build, config = test_trainer_step.build, test_trainer_step.config
trajectories = test_trainer_step.trajectories  # the fixture of scripted episodes, rewards 1, 0, 1, 0

SLOTS = [{"prompt": EPISODE_SLOT} for _ in range(4)]


def sampled_trajectories(model, tokenizer, episode_tokens, policy_version: int = 0) -> list[Trajectory]:
    """Four one-turn episodes sampled by `model` with the HF sampler, rewards 1, 0, 1, 0."""
    from trainer_client.rollout.hf_sampler import HFTurnSampler

    torch.manual_seed(0)
    sampler = HFTurnSampler(model, tokenizer.pad_token_id, episode_tokens.stop_ids)
    prompts = [
        tokenizer.encode(f"<|im_start|>user\nfix clamp {n}<|im_end|>\n<|im_start|>assistant\n") for n in range(4)
    ]
    out = []
    for n, (prompt, turn) in enumerate(zip(prompts, sampler.generate_batch(prompts, [24] * 4))):
        trajectory = Trajectory(prompt_ids=prompt, reward=float(n % 2 == 0), policy_version=policy_version)
        trajectory.append(turn.ids, turn.logprobs, from_policy=True)
        out.append(trajectory)
    return out


def policy_logps(trainer, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        return trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, inputs["completion_ids"].size(1))[0]


def test_sampler_logprobs_are_the_old_logprobs_and_clipping_engages_once_the_policy_moved(
    tmp_path, tokenizer, episode_tokens
):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    model = tiny_qwen2(tokenizer)
    played = sampled_trajectories(model, tokenizer, episode_tokens, policy_version=0)
    trainer = RegrowGRPOTrainer(
        model=model,
        args=config(tmp_path, RegrowGRPOConfig, max_completion_length=32),
        reward_funcs=env_reward,
        train_dataset=episode_slots(4),
        processing_class=tokenizer,
        rollout_func=lambda prompts, t: trajectory_rows(played, episode_tokens),
    )
    trainer.state.global_step = 2  # the group was sampled two updates ago
    trainer.current_gradient_accumulation_steps = 1  # set by train(); this test steps by hand
    inputs = trainer._generate_and_score_completions(SLOTS)
    mask = inputs["completion_mask"].bool()

    # on-policy, the sampler's logprobs are the trainer's own at the same tokens (KV-cached decoding aside): ratio 1
    old = inputs["old_per_token_logps"][mask]
    torch.testing.assert_close(old, policy_logps(trainer, inputs)[mask], atol=5e-3, rtol=0)
    assert trainer._metrics["train"]["rollout/staleness_max"][-1] == 2.0

    with torch.no_grad():  # the policy moves on, as it does while a stale group waits in the buffer
        for parameter in trainer.model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    ratio = (policy_logps(trainer, inputs) - inputs["old_per_token_logps"]).exp()[mask]
    assert (ratio - 1).abs().max() > 0.2
    trainer._compute_loss(trainer.model, inputs)
    assert trainer._metrics["train"]["clip_ratio/region_mean"][-1] > 0


def test_sdpo_loss_adds_up_over_hinted_turns_on_dr_grpo_scale(tmp_path, tokenizer, trajectories, episode_tokens):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    args = config(tmp_path, RegrowGRPOConfig, alpha_sdpo=1.0, sdpo_teacher="initial")
    trainer = build(RegrowGRPOTrainer, args, tiny_qwen2(tokenizer), tokenizer, trajectories, episode_tokens)
    inputs = trainer._generate_and_score_completions(SLOTS)
    width = inputs["prompt_ids"].size(1) + inputs["completion_ids"].size(1)
    hidden = torch.randn(4, width, trainer.model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    rows = [row for row, turns in enumerate(inputs["sdpo_turns"]) if turns]
    assert len(rows) >= 2

    def loss_of(kept_rows):
        turns = [turns if row in kept_rows else [] for row, turns in enumerate(inputs["sdpo_turns"])]
        return trainer._sdpo_loss(trainer.model, {**inputs, "sdpo_turns": turns}, hidden, "train")

    # a token weighs the same whatever else the batch holds: the batch's loss is the sum of its rows' losses
    parts = [loss_of({row}) for row in rows]
    torch.testing.assert_close(loss_of(set(rows)), sum(parts))
    divergence = trainer._metrics["train"]["sdpo/divergence_mean"][-1]
    tokens = trainer._metrics["train"]["sdpo/distilled_tokens"][-1]
    assert loss_of(set(rows)).item() == pytest.approx(divergence * tokens / (4 * 512), rel=1e-4)


def test_a_nan_sampling_logprob_is_dropped_and_does_not_poison_the_step(
    tmp_path, tokenizer, trajectories, episode_tokens
):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    broken = copy.deepcopy(trajectories)
    for trajectory in (broken[0], broken[3]):  # vLLM's None logprob arrives as NaN, here inside a hinted turn
        turn = trajectory.hinted_turns[0]
        trajectory.logprobs[turn.start + 1] = math.nan
    args = config(tmp_path, RegrowGRPOConfig, alpha_sdpo=1.0, sdpo_teacher="initial")
    trainer = build(RegrowGRPOTrainer, args, tiny_qwen2(tokenizer), tokenizer, broken, episode_tokens)
    trainer.train()

    logged = next(e for e in trainer.state.log_history if "sdpo/loss" in e)
    assert logged["sampling/nan_tokens_dropped"] == 2.0
    assert all(math.isfinite(logged[name]) for name in ("loss", "rlvr/loss", "sdpo/loss"))
    assert all(torch.isfinite(parameter).all() for parameter in trainer.model.parameters())


def test_each_channel_logs_its_gradient_norm_and_rlvrs_is_its_own(tmp_path, tokenizer, trajectories, episode_tokens):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    base = tiny_qwen2(tokenizer)
    logged = {}
    for alpha in (0.0, 1.0):
        args = config(tmp_path / str(alpha), RegrowGRPOConfig, alpha_sdpo=alpha, sdpo_teacher="initial")
        trainer = build(RegrowGRPOTrainer, args, copy.deepcopy(base), tokenizer, trajectories, episode_tokens)
        trainer.train()
        logged[alpha] = next(e for e in trainer.state.log_history if "rlvr/grad_norm" in e)

    assert logged[1.0]["sdpo/grad_norm"] > 0 and "sdpo/grad_norm" not in logged[0.0]
    # SDPO's share is taken out of the gradient at the batch's states: what is left is RLVR's alone
    assert logged[1.0]["rlvr/grad_norm"] == pytest.approx(logged[0.0]["rlvr/grad_norm"], rel=1e-4)


def test_dpo_enters_the_step_as_a_sum_over_pairs_on_dr_grpo_scale(tmp_path, tokenizer, trajectories, episode_tokens):
    from regrow.bench.training import synthetic_pairs
    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    model = tiny_qwen2(tokenizer)
    pairs = synthetic_pairs(tokenizer, model, count=2, context_turns=1)
    args = config(tmp_path, RegrowGRPOConfig, beta_dpo=1.0)
    trainer = build(
        RegrowGRPOTrainer, args, model, tokenizer, trajectories, episode_tokens, pair_batches=PairBatches(pairs, 2)
    )
    trainer.train()

    logged = next(e for e in trainer.state.log_history if "dpo/loss" in e)
    # dpo/loss stays DPO's own mean over pairs; the step adds it times pairs / (B * L_max)
    assert logged["dpo/loss"] == pytest.approx(math.log(2), abs=1e-3)
    assert logged["loss"] == pytest.approx(logged["rlvr/loss"] + logged["dpo/loss"] * 2 / (4 * 512), abs=1e-6)
