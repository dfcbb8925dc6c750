"""`regrow bench train`: step time of plain GRPO vs all three channels on the same batches.

The batches are synthetic but shaped like real episodes: every row has `turns` policy turns
separated by env responses, `hinted_share` of the turns follow env feedback, and each step draws
`pairs` replay pairs whose contexts are episode prefixes. Rollouts are fixed, so the timings are
those of the trainer step alone (forward, SDPO teacher, DPO pairs, backward, optimizer).
"""

import random
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proto import ToolCall, tool_specs
from proto.transcript import format_tool_call, initial_messages
from regrow.bench.options import TrainBenchOptions
from trainer_client.rollout.agent_loop import Trajectory, TurnRecord
from trainer_client.rollout.chat_format import hint_message
from trainer_client.rollout.chat_tokens import EpisodeTokenizer

TURN_TOKENS = 40
RESPONSE_TOKENS = 60
PROBLEM = "The function clamp in calc/ops.py raises NotImplementedError. Implement it so the tests pass."


def synthetic_trajectories(
    tokens: EpisodeTokenizer, rows: int, turns: int, hinted_share: float, seed: int = 0, policy: Any = None
) -> list[Trajectory]:
    """Rows of random policy turns and env responses; a `hinted_share` of the turns draw env feedback (SDPO's hint).

    With `policy`, each turn token's logprob is that model's own, as if it had sampled the turns: importance ratios
    are then about 1, as in a fresh rollout (a fixed logprob far from the model's would scale every SDPO token).
    """
    rng = random.Random(seed)
    vocab = [i for i in range(len(tokens.tokenizer)) if i not in tokens.stop_ids and i != tokens.tokenizer.pad_token_id]
    messages = initial_messages(PROBLEM, tool_specs())
    prompt = tokens.prompt_ids(messages)
    hinted = set(rng.sample([(r, t) for r in range(rows) for t in range(turns)], round(hinted_share * rows * turns)))
    out = []
    for row in range(rows):
        trajectory = Trajectory(prompt_ids=prompt, reward=float(row % 2), done=True, stop_reason="done")
        prompt_at = -len(tokens.first_generation_prompt(messages))
        for turn in range(turns):
            start = len(trajectory.completion_ids)
            ids = rng.choices(vocab, k=TURN_TOKENS - 1) + [tokens.end_of_turn_id]
            trajectory.append(ids, [-2.0] * len(ids), from_policy=True)
            feedback = "edit text not found in calc/ops.py" if (row, turn) in hinted else None
            trajectory.turns.append(TurnRecord(start, start + len(ids), "", 1, [], feedback, prompt_at))
            if turn < turns - 1:
                trajectory.append(rng.choices(vocab, k=RESPONSE_TOKENS), None, from_policy=False)
                prompt_at = len(trajectory.completion_ids)
                trajectory.append(tokens.env_segment(hint_message("x")).generation_prompt_ids, None, from_policy=False)
        out.append(trajectory)
    if policy is not None:
        for trajectory in out:
            trajectory.logprobs = _policy_logprobs(policy, trajectory)
    return out


def _policy_logprobs(policy: Any, trajectory: Trajectory) -> list[float]:
    """The policy's logprob (temperature 1) of each of its own tokens in the trajectory, 0 for env tokens."""
    import torch

    ids = torch.tensor([trajectory.prompt_ids + trajectory.completion_ids])
    with torch.no_grad():
        logits = policy(input_ids=ids).logits[0, len(trajectory.prompt_ids) - 1 : -1].float()
    picked = torch.log_softmax(logits, -1).gather(-1, ids[0, len(trajectory.prompt_ids) :].unsqueeze(-1)).squeeze(-1)
    return [value if from_policy else 0.0 for value, from_policy in zip(picked.tolist(), trajectory.env_mask)]


def synthetic_pairs(tokenizer: Any, model: Any, count: int, context_turns: int, seed: int = 0) -> list:
    """Replay pairs whose contexts are `context_turns`-turn episode prefixes, scored by `model` as reference."""
    import torch

    from trainer_client.channels.dpo_loss import completion_logps
    from trainer_client.channels.preference_pairs import PreferencePair, completion_ids
    from trainer_client.channels.reference_policy import weights_dtype, weights_sha256

    rng = random.Random(seed)
    weights, dtype = weights_sha256(model), weights_dtype(model)
    pairs = []
    for index in range(count):
        context = initial_messages(PROBLEM, tool_specs())
        for turn in range(context_turns):
            context.append(
                {"role": "assistant", "content": format_tool_call(ToolCall(tool="run", args={"command": f"ls {turn}"}))}
            )
            context.append(
                {
                    "role": "user",
                    "content": "<tool_response>\n" + "calc/ops.py tests/ " * rng.randint(8, 16) + "\n</tool_response>",
                }
            )
        chosen = format_tool_call(ToolCall(tool="read_file", args={"path": "calc/ops.py"}))
        rejected = format_tool_call(ToolCall(tool="run", args={"command": f"rm -rf {index}"}))
        prompt, chosen_ids = completion_ids(tokenizer, context, chosen)
        _, rejected_ids = completion_ids(tokenizer, context, rejected)
        with torch.no_grad():
            reference = completion_logps(model, [(prompt, chosen_ids), (prompt, rejected_ids)], tokenizer.pad_token_id)
        pairs.append(
            PreferencePair(
                trace_id=f"bench-{index}",
                task_id="bench",
                step_index=context_turns,
                context=context,
                chosen=ToolCall(tool="read_file", args={"path": "calc/ops.py"}),
                rejected=ToolCall(tool="run", args={"command": f"rm -rf {index}"}),
                chosen_text=chosen,
                rejected_text=rejected,
                reference_chosen_logp=float(reference[0]),
                reference_rejected_logp=float(reference[1]),
                chosen_tokens=len(chosen_ids),
                rejected_tokens=len(rejected_ids),
                reference_policy="bench",
                reference_weights=weights,
                reference_dtype=dtype,
                teachers=["bench"],
                agreement=1.0,
            )
        )
    return pairs


def bench_model(spec: str) -> tuple[Any, Any]:
    """(model, tokenizer): `tiny`, a random 2-layer Qwen2 with the demo tokenizer, or a policy `load_policy` reads."""
    if spec == "tiny":
        from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

        from trainer_client.policy.policy_loading import demo_gguf_path

        gguf = demo_gguf_path()  # the demo tokenizer and chat template, with a small random model
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=8192,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        tokenizer.padding_side = "left"
        return Qwen2ForCausalLM(config), tokenizer
    from trainer_client.policy.policy_loading import load_policy

    return load_policy(spec, "cpu")


@dataclass(frozen=True)
class TrainedAs:
    """How the bench's trainers train: a fresh LoRA adapter of rank `lora_r` (0: every weight), as rank `rank` of
    `world` processes."""

    lora_r: int = 0
    rank: int = 0
    world: int = 1


def bench_trainer(model, tokenizer, trajectories, tokens, pairs, workdir: Path, trained_as=TrainedAs(), **channels):
    """A trainer whose rollouts are the fixed synthetic batch (this rank's share of it), ready to step by hand: its
    model and optimizer prepared by accelerate as `trainer.train()` would, so that a rank's gradients are all-reduced.
    With a `trained_as.lora_r`, the model trains a fresh LoRA adapter of that rank, as `regrow train --lora-r` does."""
    import copy

    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.policy.lora_adapter import with_lora
    from trainer_client.rollout.rows import env_reward, episode_slots, trajectory_rows
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    args = RegrowGRPOConfig(
        output_dir=str(workdir),
        per_device_train_batch_size=len(trajectories),
        num_generations=2,
        max_completion_length=len(trajectories[0].completion_ids),
        learning_rate=1e-6,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        **channels,
    )
    policy = copy.deepcopy(model)
    rank, world = trained_as.rank, trained_as.world
    if trained_as.lora_r:
        policy = with_lora(policy, trained_as.lora_r, None, 0.0, "all-linear")
    trainer = RegrowGRPOTrainer(
        model=policy,
        args=args,
        reward_funcs=env_reward,
        train_dataset=episode_slots(len(trajectories) // 2),
        processing_class=tokenizer,
        rollout_func=lambda prompts, t: trajectory_rows(trajectories, tokens),
        pair_batches=PairBatches(pairs, len(pairs), rank=rank, world=world) if channels.get("beta_dpo") else None,
    )
    trainer.create_optimizer()
    if world > 1:
        # As Trainer's own loop: the step runs the DDP wrapper, while TRL reads the bare model as `trainer.model`.
        trainer.model_wrapped, trainer.optimizer = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def _timed_step(trainer, slots: list[dict]) -> float:
    """One optimizer step: rollouts (fixed), the loss of every channel, backward, optimizer update."""
    start = time.perf_counter()
    trainer.training_step(trainer.model_wrapped, slots, None)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad()
    return time.perf_counter() - start


def run_train_bench(options: TrainBenchOptions, rank: int = 0, world: int = 1) -> dict:
    """Median step time of plain GRPO and of GRPO + SDPO + DPO on identical batches, and their ratio.

    `dpo_context_grad` is the trainer's setting of that name: False measures DPO with the pairs'
    contexts run without gradient. `lora` trains a LoRA adapter of that rank instead of every weight. As rank `rank`
    of `world` processes (torchrun's; training_ranks.py launches them), this process trains its share of the rows and
    pairs, and the figures are its own, with every step's timings under `step_times_s` for the launcher to combine.
    """
    import torch

    rows, turns, pair_count, lora_r = options.rows, options.turns, options.pairs, options.lora
    if problem := split_problem(rows, pair_count, world):
        raise ValueError(problem)
    torch.manual_seed(0)
    model, tokenizer = bench_model(options.model)
    tokens = EpisodeTokenizer(tokenizer)
    batch = synthetic_trajectories(tokens, rows, turns, options.hinted_share, policy=model)
    share = rows // world
    trajectories = batch[rank * share : (rank + 1) * share]
    pairs = synthetic_pairs(tokenizer, model, pair_count, context_turns=turns // 2)
    from trainer_client.rollout.rows import EPISODE_SLOT

    slots = [{"prompt": EPISODE_SLOT} for _ in trajectories]
    sharing = TrainedAs(lora_r, rank, world)
    with tempfile.TemporaryDirectory() as workdir:
        grpo = bench_trainer(model, tokenizer, trajectories, tokens, pairs, Path(workdir) / "grpo", sharing)
        three = bench_trainer(
            model,
            tokenizer,
            trajectories,
            tokens,
            pairs,
            Path(workdir) / "three",
            sharing,
            alpha_sdpo=1.0,
            beta_dpo=0.1,
            sdpo_teacher="live",
            dpo_context_grad=options.dpo_context_grad,
        )
        plain, both = [], []
        for _ in range(options.steps + 1):  # alternate, so that load from other processes hits both alike
            plain.append(_timed_step(grpo, slots))
            both.append(_timed_step(three, slots))
        metrics = {name: values[-1] for name, values in three._metrics["train"].items()}
        trained = three.accelerator.unwrap_model(three.model)
        trainable = sum(p.numel() for p in trained.parameters() if p.requires_grad)
        weights_digest = _digest(trained)
    plain, both = plain[1:], both[1:]  # the first step warms up allocators and caches
    plain_s, three_s = statistics.median(plain), statistics.median(both)
    return {
        "model": options.model,
        "device": "cpu",
        "processes": world,
        "lora_r": lora_r or None,
        "trainable_parameters": trainable,
        "weights_digest": weights_digest,
        "step_times_s": {"grpo": plain, "three_channel": both},
        "rows_per_batch": rows,
        "rows_per_process": share,
        "turns_per_row": turns,
        "tokens_per_row": len(trajectories[0].prompt_ids) + len(trajectories[0].completion_ids),
        "hinted_turns_per_batch": sum(len(t.hinted_turns) for t in batch),
        "dpo_pairs_per_batch": pair_count,
        "dpo_context_grad": options.dpo_context_grad,
        "steps_timed": options.steps,
        "grpo_step_s": round(plain_s, 4),
        "three_channel_step_s": round(three_s, 4),
        "three_channel_vs_grpo": round(three_s / plain_s, 3),
        "target_ratio": 1.35,
        "distilled_tokens_per_batch": metrics.get("sdpo/distilled_tokens"),
        "dpo_pairs_used_per_batch": metrics.get("dpo/pairs"),
        "sdpo_loss": metrics.get("sdpo/loss"),
        "sdpo_divergence_per_token": metrics.get("sdpo/divergence_mean"),
        "sdpo_importance_ratio_mean": metrics.get("sdpo/importance_ratio_mean"),
        "dpo_loss": metrics.get("dpo/loss"),
        "grad_norms": {channel: metrics.get(f"{channel}/grad_norm") for channel in ("rlvr", "sdpo", "dpo")},
        "peak_rss_gib": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2
        ),  # both trainers, all steps
    }


def split_problem(rows: int, pairs: int, world: int) -> str | None:
    """Why `rows` trajectories and `pairs` DPO pairs cannot split over `world` processes; None when they can."""
    if rows % (2 * world) == 0 and pairs >= world:
        return None
    return (
        f"{rows} rows and {pairs} pairs do not split over {world} processes: give rows a multiple of {2 * world} "
        f"(groups of 2) and at least {world} pairs"
    )


def _digest(model: Any) -> str:
    """A hash of every weight after the steps: ranks whose gradients were all-reduced hold the same ones."""
    import hashlib

    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(parameter.detach().float().numpy().tobytes())
    return digest.hexdigest()[:16]
