"""`regrow bench gpu --json`: step time, tokens per second and peak memory of each channel mix on models of real
shapes, from a recorded batch (benchmarks/gpu_replay.py), with the bf16 sampler's gap and the plan's memory beside.

Each mix trains a fresh model of the same seed through `Trainer.train`, the path `regrow train` takes (accelerate's
autocast, clipping, the optimizer), for a warm-up step and the timed ones.
"""

from __future__ import annotations

import gc
import logging
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from proto import EpisodeTokens
from regrow.benchmarks.gpu_replay import (
    GIB,
    MIXES,
    ShapeRun,
    compact_ids,
    policy_spans,
    random_model,
    read_recording,
    replay_pairs,
    replay_rows,
    rewards_that_train,
    sample_in_bf16,
    stand_in_tokenizer,
)
from trainer_client.train.run import resolve_device

log = logging.getLogger(__name__)


def _step_timer() -> Any:
    """A TrainerCallback that keeps each optimizer step's wall time (after the GPU has finished it)."""
    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._started = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self._started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.seconds.append(time.perf_counter() - self._started)

    return StepTimer()


def _train_mix(
    run: ShapeRun,
    mix: str,
    episodes: list[EpisodeTokens],
    tokenizer: Any,
    pairs: list[tuple[Any, Any]],
    device: str,
    group_size: int,
    steps: int,
    seed: int,
) -> dict[str, Any]:
    import torch
    from transformers import PrinterCallback, ProgressCallback

    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.rollout.rows import env_reward, episode_slots
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    channels = MIXES[mix]
    model = random_model(run, len(tokenizer), device, seed)
    timer = _step_timer()
    rows = replay_rows(episodes)
    with tempfile.TemporaryDirectory(prefix="regrow-bench-gpu-") as workdir:
        args = RegrowGRPOConfig(
            output_dir=workdir,
            per_device_train_batch_size=len(episodes),
            num_generations=group_size,
            max_completion_length=max(len(e.completion_ids) for e in episodes),
            max_steps=steps + 1,
            learning_rate=1e-6,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=device == "cpu",
            bf16=device == "cuda",
            seed=seed,
            disable_tqdm=True,
            **channels,
        )
        trainer = RegrowGRPOTrainer(
            model=model,
            args=args,
            reward_funcs=env_reward,
            train_dataset=episode_slots(len(episodes) // group_size),
            processing_class=tokenizer,
            rollout_func=lambda prompts, trainer: rows,
            pair_batches=PairBatches([pair for pair, _ in pairs], len(pairs)) if channels.get("beta_dpo") else None,
            callbacks=[timer],
        )
        # what a terminal shows of a run, and a JSON report on stdout must not carry
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer._encoded_pairs.update({(p.trace_id, p.step_index, p.chosen_text): e for p, e in pairs})
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
        peak = torch.cuda.max_memory_allocated() / GIB if device == "cuda" else None
    metrics = trainer.state.log_history[-2] if len(trainer.state.log_history) > 1 else {}
    del trainer, model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    timed = timer.seconds[1:]  # the first step warms up kernels and allocators
    step_s = statistics.median(timed)
    tokens = sum(len(e.prompt_ids) + len(e.completion_ids) for e in episodes)
    wanted = ("rlvr/grad_norm", "sdpo/grad_norm", "dpo/grad_norm", "sdpo/distilled_tokens", "dpo/pairs")
    clip = {name: value for name, value in metrics.items() if name.startswith("clip_ratio")}
    return {
        "step_s": round(step_s, 4),
        "steps_timed": len(timed),
        "tokens_per_s": round(tokens / step_s, 1),
        "peak_memory_gib": round(peak, 2) if peak is not None else None,
        "trl_clip_ratios": clip,
        **{name: metrics[name] for name in wanted if name in metrics},
    }


def _planned_gib(run: ShapeRun, episodes: list[EpisodeTokens], mix: str, gpu_gib: float) -> float | None:
    from trainer_client.train.memory_plan import RunShape, plan_memory, shape_of

    if run.shape == "tiny":
        return None
    turn = max(end - start for e in episodes for start, end in policy_spans(e.env_mask))
    shape = RunShape(
        rows=len(episodes),
        tokens_per_row=max(len(e.prompt_ids) + len(e.completion_ids) for e in episodes),
        turn_tokens=turn,
        lora_r=run.lora_r,
        sdpo_teacher="live" if MIXES[mix].get("alpha_sdpo") else None,
        weight_bytes=2 if run.weights_dtype == "bfloat16" else 4,
    )
    return round(plan_memory(shape_of(run.shape), shape, gpu_gib).total_bytes / GIB, 2)


def run_gpu_bench(
    recording: Path,
    shapes: list[str],
    mixes: list[str],
    rows: int,
    group_size: int,
    steps: int,
    pair_count: int,
    device_choice: str = "auto",
    seed: int = 0,
) -> dict[str, Any]:
    """Per shape and channel mix: step time, tokens/s, peak memory (against the plan's), the bf16 sampler's gap and
    its IS ratio and clip shares, and what the SDPO teacher adds to a step."""
    import torch

    started = time.perf_counter()
    unknown = [mix for mix in mixes if mix not in MIXES]
    if unknown:
        raise ValueError(f"--mix {unknown[0]!r}: choose among {', '.join(MIXES)}")
    if rows % group_size:
        raise ValueError(f"--rows {rows} is not a whole number of groups of --group-size {group_size}")
    runs = [ShapeRun.parse(text) for text in shapes]
    device = resolve_device(device_choice)
    recorded = read_recording(recording, rows)
    alternated = rewards_that_train(recorded, group_size)
    gpu_gib = torch.cuda.get_device_properties(0).total_memory / GIB if device == "cuda" else None
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "recording": str(recording),
        "rows": rows,
        "group_size": group_size,
        "tokens_per_step": sum(len(e.prompt_ids) + len(e.completion_ids) for e in recorded),
        "policy_tokens_per_step": sum(sum(e.env_mask) for e in recorded),
        "hinted_turns_per_step": sum(len(e.hinted_turns) for e in recorded),
        "dpo_pairs_per_step": pair_count,
        "groups_given_alternating_rewards": alternated,  # their recorded rewards were all equal: no RLVR gradient
        "shapes": [],
    }
    for run in runs:
        log.info("bench gpu: %s", run)
        episodes = compact_ids(recorded) if run.shape == "tiny" else [e.model_copy(deep=True) for e in recorded]
        tokenizer = stand_in_tokenizer(episodes)
        model = random_model(run, len(tokenizer), device, seed)
        entry: dict[str, Any] = {
            "shape": run.shape,
            "lora_r": run.lora_r,
            "weights_dtype": run.weights_dtype,
            "parameters": sum(p.numel() for p in model.parameters()),
            "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "bf16_sampler": sample_in_bf16(model, episodes, device),
        }
        pairs = (
            replay_pairs(model, episodes, pair_count, device) if any(MIXES[m].get("beta_dpo") for m in mixes) else []
        )
        del model
        gc.collect()
        entry["mixes"] = {}
        for mix in mixes:
            measured = _train_mix(run, mix, episodes, tokenizer, pairs, device, group_size, steps, seed)
            if gpu_gib is not None:
                measured["planned_memory_gib"] = _planned_gib(run, episodes, mix, gpu_gib)
            entry["mixes"][mix] = measured
        if "rlvr" in entry["mixes"] and "rlvr+sdpo" in entry["mixes"]:
            entry["sdpo_teacher_s"] = round(entry["mixes"]["rlvr+sdpo"]["step_s"] - entry["mixes"]["rlvr"]["step_s"], 4)
        report["shapes"].append(entry)
    report["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    return report
