"""The trainer step on the tiny Qwen2: alpha=0 is stock GRPO, SDPO touches only hinted turns, DPO plugs in."""

import copy
import math

import pytest
import torch

from tests.trainer_client.conftest import play_scripts
from tests.trainer_client.tiny_policy import tiny_qwen2
from trainer_client.rollout.rows import EPISODE_SLOT, env_reward, episode_slots, trajectory_rows

pytestmark = pytest.mark.train

MALFORMED = "<tool_call>{not json}</tool_call>"
RUN_LS = '<tool_call>\n{"name": "run", "arguments": {"command": "ls"}}\n</tool_call>'
WRITE = '<tool_call>\n{"name": "write_file", "arguments": {"path": "calc/ops.py", "content": "x = 1"}}\n</tool_call>'
SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
SCRIPTS = [[MALFORMED, WRITE, SUBMIT], [RUN_LS, SUBMIT], [WRITE, RUN_LS, SUBMIT], [MALFORMED, SUBMIT]]


@pytest.fixture(scope="module")
def trajectories(scripted_env_url, tokenizer, episode_tokens):
    return play_scripts(scripted_env_url, tokenizer, episode_tokens, SCRIPTS)


def config(tmp_path, cls, **overrides):
    fields = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=512,
        max_steps=1,
        learning_rate=1e-2,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        seed=0,
        loss_type="dr_grpo",
        scale_rewards="none",
        beta=0.0,
        gradient_checkpointing=False,
    )
    fields.update(overrides)
    return cls(**fields)


def fixed_rollouts(trajectories, episode_tokens):
    return lambda prompts, trainer: trajectory_rows(trajectories[: len(prompts)], episode_tokens)


def build(trainer_cls, args, model, tokenizer, trajectories, episode_tokens, **kwargs):
    return trainer_cls(
        model=model,
        args=args,
        reward_funcs=env_reward,
        train_dataset=episode_slots(4),
        processing_class=tokenizer,
        rollout_func=fixed_rollouts(trajectories, episode_tokens),
        **kwargs,
    )


def test_trajectories_have_hinted_turns_and_mixed_rewards(trajectories):
    assert [t.reward for t in trajectories] == [1.0, 0.0, 1.0, 0.0]
    assert sum(len(t.hinted_turns) for t in trajectories) >= 2


def test_alpha_zero_step_equals_stock_grpo_trainer(tmp_path, tokenizer, trajectories, episode_tokens):
    from trl import GRPOConfig, GRPOTrainer

    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    base = tiny_qwen2(tokenizer)
    # SGD: Adam's first step, g / (|g| + eps), magnifies float noise in near-zero gradients up to lr.
    # Each trainer seeds the global RNG when it is built; build and train one after the other.
    stock = build(
        GRPOTrainer,
        config(tmp_path / "stock", GRPOConfig, optim="sgd"),
        copy.deepcopy(base),
        tokenizer,
        trajectories,
        episode_tokens,
    )
    stock.train()
    ours = build(
        RegrowGRPOTrainer,
        config(tmp_path / "ours", RegrowGRPOConfig, alpha_sdpo=0.0, importance_correction=False, optim="sgd"),
        copy.deepcopy(base),
        tokenizer,
        trajectories,
        episode_tokens,
    )
    ours.train()

    stock_loss = next(e["loss"] for e in stock.state.log_history if "loss" in e)
    our_loss = next(e["loss"] for e in ours.state.log_history if "loss" in e)
    assert our_loss == stock_loss
    changed = 0
    for (name, a), b in zip(stock.model.named_parameters(), ours.model.parameters(), strict=True):
        # Equal up to float reduction order: CPU kernels may sum in a different order between two runs.
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)
        changed += not torch.equal(a, dict(base.named_parameters())[name])
    assert changed > 0  # the step did move the weights


def test_sdpo_step_differs_from_grpo_and_logs_distilled_tokens(tmp_path, tokenizer, trajectories, episode_tokens):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    base = tiny_qwen2(tokenizer)
    plain = build(
        RegrowGRPOTrainer,
        config(tmp_path / "plain", RegrowGRPOConfig),
        copy.deepcopy(base),
        tokenizer,
        trajectories,
        episode_tokens,
    )
    plain.train()
    sdpo = build(
        RegrowGRPOTrainer,
        config(tmp_path / "sdpo", RegrowGRPOConfig, alpha_sdpo=1.0, sdpo_teacher="initial"),
        copy.deepcopy(base),
        tokenizer,
        trajectories,
        episode_tokens,
    )
    sdpo.train()

    logged = next(e for e in sdpo.state.log_history if "sdpo/loss" in e)
    assert logged["sdpo/distilled_tokens"] > 0 and math.isfinite(logged["sdpo/loss"]) and logged["sdpo/loss"] > 0
    assert math.isfinite(logged["rlvr/loss"])
    assert any(not torch.equal(a, b) for a, b in zip(plain.model.parameters(), sdpo.model.parameters()))


def test_sdpo_gradient_touches_only_the_hinted_turn_tokens(tmp_path, tokenizer, trajectories, episode_tokens):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    trainer = build(
        RegrowGRPOTrainer,
        config(tmp_path, RegrowGRPOConfig, alpha_sdpo=1.0),
        tiny_qwen2(tokenizer),
        tokenizer,
        trajectories,
        episode_tokens,
    )
    inputs = trainer._generate_and_score_completions([{"prompt": EPISODE_SLOT} for _ in range(4)])
    width = inputs["prompt_ids"].size(1) + inputs["completion_ids"].size(1)
    hidden = torch.randn(4, width, trainer.model.config.hidden_size, requires_grad=True)

    loss = trainer._sdpo_loss(trainer.model, inputs, hidden, "train")
    loss.backward()

    expected = torch.zeros(4, width, dtype=torch.bool)
    prompt_width = inputs["prompt_ids"].size(1)
    for row, turns in enumerate(inputs["sdpo_turns"]):
        for turn in turns:
            expected[row, prompt_width + turn.start - 1 : prompt_width + turn.end - 1] = True
    assert expected.any()
    touched = hidden.grad.abs().sum(-1) > 0
    assert torch.equal(touched, expected)


def test_teacher_context_is_the_template_rendering_with_the_turns_own_feedback_before_it(
    tokenizer, trajectories, episode_tokens
):
    from proto import CodingObservation, tool_specs
    from proto.transcript import initial_messages, tool_response_message
    from trainer_client.channels.hinted_self import teacher_context
    from trainer_client.rollout.chat_format import hint_message
    from trainer_client.rollout.rows import hinted_turns

    trajectory = trajectories[3]  # malformed call, then submit: both turns draw feedback
    first, last = hinted_turns(trajectory, episode_tokens)
    start = initial_messages("Implement clamp in calc/ops.py.", tool_specs())
    before_last = [{"role": "assistant", "content": MALFORMED}, tool_response_message([CodingObservation(output="")])]

    for turn, history, record in [(first, [], trajectory.turns[0]), (last, before_last, trajectory.turns[1])]:
        messages = start + history + [hint_message(record.feedback)]
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        turn_ids = trajectory.completion_ids[record.start : record.end]
        got = teacher_context(trajectory.prompt_ids, trajectory.completion_ids, turn, turn.end)
        assert got == list(rendered) + turn_ids


def test_ema_teacher_follows_the_policy_and_initial_teacher_stays(tokenizer):
    from trainer_client.channels.hinted_self import SDPOTeacher, TeacherWeights

    policy = tiny_qwen2(tokenizer)
    ema = SDPOTeacher(TeacherWeights.ema, policy, ema_decay=0.5)
    initial = SDPOTeacher(TeacherWeights.initial, policy)
    start = next(policy.parameters()).detach().clone()
    with torch.no_grad():
        next(policy.parameters()).add_(1.0)

    ema.update(policy)
    initial.update(policy)

    with ema.teacher(policy) as teacher:
        assert torch.allclose(next(teacher.parameters()), start + 0.5)
    with initial.teacher(policy) as teacher:
        assert torch.equal(next(teacher.parameters()), start)
    with SDPOTeacher(TeacherWeights.live, policy).teacher(policy) as teacher:
        assert teacher is policy


def test_shared_prompt_pair_logps_match_a_full_forward(tokenizer):
    from trainer_client.channels.dpo_loss import completion_logps
    from trainer_client.policy.policy_forward import pair_logps

    model = tiny_qwen2(tokenizer)
    prompts = [
        tokenizer.encode("<|im_start|>user\nfix clamp<|im_end|>\n<|im_start|>assistant\n"),
        tokenizer.encode("ls -la and run"),
    ]
    chosen = [tokenizer.encode(SUBMIT), tokenizer.encode("ran it")]
    rejected = [tokenizer.encode(RUN_LS), tokenizer.encode("x")]

    got_chosen, got_rejected = pair_logps(model, list(zip(prompts, chosen, rejected)), tokenizer.pad_token_id)
    want = completion_logps(model, list(zip(prompts, chosen)) + list(zip(prompts, rejected)), tokenizer.pad_token_id)

    assert torch.allclose(torch.cat([got_chosen, got_rejected]), want, atol=1e-4)


@pytest.mark.parametrize("context_grad", [True, False])
def test_dpo_channel_runs_beside_rollouts_and_logs_by_name(
    tmp_path, tokenizer, trajectories, episode_tokens, context_grad
):
    from regrow.bench.training import synthetic_pairs
    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    model = tiny_qwen2(tokenizer)
    pairs = synthetic_pairs(tokenizer, model, count=2, context_turns=1)
    trainer = build(
        RegrowGRPOTrainer,
        config(tmp_path, RegrowGRPOConfig, beta_dpo=1.0, dpo_beta=0.5, dpo_context_grad=context_grad),
        model,
        tokenizer,
        trajectories,
        episode_tokens,
        pair_batches=PairBatches(pairs, 2),
    )
    trainer.train()

    logged = next(e for e in trainer.state.log_history if "dpo/loss" in e)
    assert logged["dpo/pairs"] == 2.0
    # Policy == reference at the first step, up to fp32 reduction order: the trainer scores a pair through TRL's
    # patched LM head and a shared-prompt forward, the reference through one plain forward; about 1e-5 of a summed
    # logprob over ~35 tokens, so the margin is a few thousandths (a wrong reference is off by whole nats).
    assert logged["dpo/loss"] == pytest.approx(math.log(2), abs=5e-3)
    assert abs(logged["dpo/rewards/margins"]) < 0.01
    assert {"dpo/rewards/margins", "dpo/rewards/accuracies", "rlvr/loss"} <= set(logged)


def test_three_channels_continue_a_bf16_autocast_forward(tmp_path, tokenizer, trajectories, episode_tokens):
    """The GPU path's mixed precision, on CPU: the extra channels continue keys and values recorded in bf16."""
    from regrow.bench.training import synthetic_pairs
    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    model = tiny_qwen2(tokenizer)
    pairs = synthetic_pairs(tokenizer, model, count=2, context_turns=1)
    args = config(tmp_path, RegrowGRPOConfig, bf16=True, alpha_sdpo=1.0, sdpo_teacher="live", beta_dpo=1.0)
    trainer = build(
        RegrowGRPOTrainer, args, model, tokenizer, trajectories, episode_tokens, pair_batches=PairBatches(pairs, 2)
    )
    precisions = []
    probe = model.model.layers[0].mlp.down_proj.register_forward_hook(lambda _m, _i, out: precisions.append(out.dtype))
    trainer.train()
    probe.remove()

    assert set(precisions) == {torch.bfloat16}, "a channel ran outside the forward's autocast"
    assert len(precisions) >= 3  # the forward, the SDPO teacher and the DPO pairs each passed the probe
    logged = next(e for e in trainer.state.log_history if "dpo/loss" in e)
    assert logged["sdpo/distilled_tokens"] > 0 and logged["dpo/pairs"] == 2.0
    assert all(math.isfinite(logged[name]) for name in ("rlvr/loss", "sdpo/loss", "dpo/loss"))


def test_dpo_weight_without_pairs_is_refused(tmp_path, tokenizer, trajectories, episode_tokens):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    with pytest.raises(ValueError, match="--pairs"):
        build(
            RegrowGRPOTrainer,
            config(tmp_path, RegrowGRPOConfig, beta_dpo=1.0),
            tiny_qwen2(tokenizer),
            tokenizer,
            trajectories,
            episode_tokens,
        )


def test_auto_channel_weights_steer_each_channels_gradient_towards_its_share_of_rlvrs(
    tmp_path, tokenizer, trajectories, episode_tokens
):
    from regrow.bench.training import synthetic_pairs
    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    model = tiny_qwen2(tokenizer)
    pairs = synthetic_pairs(tokenizer, model, count=2, context_turns=1)
    target = 0.5  # DPO's gradient at half of RLVR's
    args = config(tmp_path, RegrowGRPOConfig, beta_dpo=target, channel_weights="auto", max_steps=3, learning_rate=1e-4)
    trainer = build(
        RegrowGRPOTrainer, args, model, tokenizer, trajectories, episode_tokens, pair_batches=PairBatches(pairs, 2)
    )
    trainer.train()

    steps = [entry for entry in trainer.state.log_history if "dpo/weight" in entry]
    assert len(steps) == 3 and steps[0]["dpo/weight"] == target  # the first step trains with the asked ratio
    assert steps[1]["dpo/weight"] != target
    misses = [abs(math.log(step["dpo/grad_norm"] / step["rlvr/grad_norm"] / target)) for step in steps]
    assert misses[-1] < misses[0] / 2  # the measured ratio closes in on the wanted one


def test_an_automatic_weight_moves_halfway_in_log_space_and_holds_without_a_measurement():
    from trainer_client.train.channel_gradients import AUTO_RANGE, next_weight

    # weighted by 2, the channel's gradient was 8 against RLVR's 1: raw 4, so 0.5 * 1 / 4 = 0.125 would hit the target
    assert next_weight(2.0, 0.5, 1.0, 8.0) == pytest.approx(math.sqrt(2.0 * 0.125))
    assert next_weight(2.0, 0.5, 0.0, 8.0) == 2.0 and next_weight(2.0, 0.5, 1.0, 0.0) == 2.0
    assert next_weight(0.5, 0.5, 1e12, 1e-12) == pytest.approx(0.5 * AUTO_RANGE)


def test_pairs_scored_in_float32_are_scored_again_at_the_bf16_autocast_training_uses(
    tmp_path, tokenizer, trajectories, episode_tokens
):
    from regrow.bench.training import synthetic_pairs
    from trainer_client.channels.preference_pairs import BF16_AUTOCAST, PairBatches
    from trainer_client.channels.reference_policy import rescored_at, training_precision
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    assert training_precision("cuda", True) == BF16_AUTOCAST and training_precision("cpu", True) == "float32"
    model = tiny_qwen2(tokenizer)
    scored = synthetic_pairs(tokenizer, model, count=2, context_turns=1)
    assert rescored_at(scored, model, tokenizer, "float32") == scored  # already at that precision: untouched
    again = rescored_at(scored, model, tokenizer, BF16_AUTOCAST)
    assert all(pair.reference_precision == BF16_AUTOCAST for pair in again)
    assert [p.reference_chosen_logp for p in again] != [p.reference_chosen_logp for p in scored]

    def first_margin(pairs) -> float:
        args = config(tmp_path / str(len(pairs[0].reference_precision)), RegrowGRPOConfig, bf16=True, beta_dpo=1.0)
        trainer = build(
            RegrowGRPOTrainer, args, copy.deepcopy(model), tokenizer, trajectories, episode_tokens,
            pair_batches=PairBatches(pairs, 2),
        )  # fmt: skip
        trainer.train()
        return abs(next(e for e in trainer.state.log_history if "dpo/loss" in e)["dpo/rewards/margins"])

    # At the first step the policy is the reference: only rounding separates them, far less at the same precision.
    assert first_margin(again) < first_margin(scored) / 4


def test_a_step_on_bf16_weights_keeps_them_and_adamws_state_in_bf16(tmp_path, tokenizer, trajectories, episode_tokens):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    model = tiny_qwen2(tokenizer).to(torch.bfloat16)
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = build(
        RegrowGRPOTrainer, config(tmp_path, RegrowGRPOConfig, alpha_sdpo=1.0, learning_rate=1e-2), model, tokenizer,
        trajectories, episode_tokens,
    )  # fmt: skip
    trainer.train()
    logged = next(e for e in trainer.state.log_history if "loss" in e)
    assert math.isfinite(logged["loss"]) and math.isfinite(logged["sdpo/loss"])
    assert any(not torch.equal(p, start[name]) for name, p in model.named_parameters())
    moments = [t for state in trainer.optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    assert moments and {t.dtype for t in moments if t.dim() > 0} == {torch.bfloat16}


def test_a_step_of_four_accumulated_micro_batches_equals_one_whole_batch_in_all_three_channels(
    tmp_path, tokenizer, trajectories, episode_tokens
):
    """--micro-batch-rows: Dr.GRPO divides each micro-batch's token sum by its rows x L_max and by the accumulation
    steps, SDPO alike, and each micro-batch takes its slice of the step's DPO pairs, so the sums add up to the whole
    batch's. Before, each micro-batch drew a whole batch of pairs: DPO trained on 4x the pairs at 4x the weight."""
    from regrow.bench.training import synthetic_pairs
    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    base = tiny_qwen2(tokenizer).double()  # in fp32, other padding widths sum in another order: 0.5% of the update
    pairs = synthetic_pairs(tokenizer, base, count=4, context_turns=1)
    updates = {}
    for rows, steps in ((4, 1), (1, 4)):
        args = config(
            tmp_path / str(steps), RegrowGRPOConfig, optim="sgd", alpha_sdpo=1.0, beta_dpo=1.0, dpo_beta=0.5,
            per_device_train_batch_size=rows, gradient_accumulation_steps=steps, steps_per_generation=steps,
        )  # fmt: skip
        trainer = build(
            RegrowGRPOTrainer, args, copy.deepcopy(base), tokenizer, trajectories, episode_tokens,
            pair_batches=PairBatches(pairs, 4, micro_batches=steps),
        )  # fmt: skip
        trainer.train()
        logged = next(e for e in trainer.state.log_history if "dpo/pairs" in e)
        assert logged["dpo/pairs"] == 4 / steps and logged["sdpo/distilled_tokens"] > 0
        before = dict(base.named_parameters())
        updates[steps] = torch.cat([(p - before[n]).flatten() for n, p in trainer.model.named_parameters()])
    gap = float((updates[4] - updates[1]).norm() / updates[1].norm())
    assert gap < 1e-6, gap  # float64: about 1e-9; each micro-batch taking the whole pair batch gave 3.0
