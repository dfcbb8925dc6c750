"""`regrow bench gpu --json`: step time, tokens per second and peak memory of each channel mix on models of real
shapes, from a recorded batch (gpu_replay.py), with the bf16 sampler's gap and the plan's memory beside.

Each mix trains a fresh model of the same seed through `Trainer.train`, the path `regrow train` takes (accelerate's
autocast, gradient accumulation, clipping, the optimizer), for a warm-up step and the timed ones. On a GPU a step's rows
go through in the micro-batches `regrow train` would choose on a GPU of --plan-gpu-gib (80: the recipes' cards), so
that the peak it measures is the one the plan for that card promises.

Before it allocates anything it holds the box's torch, transformers, trl, peft and accelerate against the versions
regrow's trainer needs, and refuses a shape the memory plan says cannot fit. A shape or a mix that fails (out of memory
included) is recorded with its error and the run goes on, so that one failure never loses what was measured.
"""

from __future__ import annotations

import gc
import logging
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from proto import EpisodeTokens
from regrow.bench.gpu_replay import (
    GIB,
    MIXES,
    RECIPE_ROW_TOKENS,
    RECORDING,
    ShapeRun,
    compact_ids,
    default_shapes,
    policy_spans,
    random_model,
    read_recording,
    replay_pairs,
    replay_rows,
    rewards_that_train,
    sample_in_bf16,
    shape_config,
    stand_in_tokenizer,
    stretched,
)
from regrow.bench.gpu_versions import checked_versions, version_mismatches
from trainer_client.train.memory_plan import (
    MemoryPlan,
    ModelShape,
    RunShape,
    fitted_plan,
    host_memory_gib,
    plan_memory,
)
from trainer_client.train.placement import resolve_device

log = logging.getLogger(__name__)

# What a step holds however short its rows: past a GPU's free memory, no shorter --pad-to or fewer --rows helps.
WEIGHT_PARTS = ("weights", "gradients", "optimizer (AdamW)", "SDPO teacher copy")


@dataclass(frozen=True)
class GpuBenchOptions:
    """What `regrow bench gpu` measures; its options are documented in regrow/bench/gpu_check.py."""

    recording: Path = RECORDING
    shapes: tuple[str, ...] = ()  # none: the shipped shapes on a GPU, tiny on a CPU
    mixes: tuple[str, ...] = tuple(MIXES)
    rows: int = 8
    group_size: int = 4
    steps: int | None = None  # None: 3 on a GPU; 1 on a CPU, where the run checks the path rather than measures
    pairs: int = 4
    device: str = "auto"
    pad_to: int | None = None  # None: a recipe's row on a GPU, the recording's own length on a CPU; 0: the recording's
    micro_batch_rows: int | None = None  # None: on a GPU what the plan fits in plan_gpu_gib, on a CPU every row
    plan_gpu_gib: float = 80.0
    ignore_versions: bool = False
    seed: int = 0


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
    run: ShapeRun, mix: str, episodes: list[EpisodeTokens], tokenizer: Any, options: GpuBenchOptions
) -> dict[str, Any]:
    import torch
    from transformers import PrinterCallback, ProgressCallback

    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.rollout.rows import env_reward, episode_slots
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    device, steps = options.device, options.steps or 1
    channels = MIXES[mix]
    micro = micro_batch_rows(run, episodes, len(tokenizer), mix, options)
    accumulation = len(episodes) // micro
    model = random_model(run, len(tokenizer), device, options.seed)
    # the reference logprobs of the weights every mix starts from: the same seed makes the same model; every
    # micro-batch trains a share of the step's pairs
    pair_count = max(options.pairs, accumulation)
    pairs = replay_pairs(model, episodes, pair_count, device) if channels.get("beta_dpo") else []
    timer = _step_timer()
    rows = replay_rows(episodes)
    with tempfile.TemporaryDirectory(prefix="regrow-bench-gpu-") as workdir:
        args = RegrowGRPOConfig(
            output_dir=workdir,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=accumulation,
            steps_per_generation=accumulation,  # as `regrow train`: a generation batch is the whole step
            num_generations=options.group_size,
            max_completion_length=max(len(e.completion_ids) for e in episodes),
            max_steps=steps + 1,
            learning_rate=1e-6,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=device == "cpu",
            bf16=device == "cuda",
            seed=options.seed,
            disable_tqdm=True,
            **channels,
        )
        trainer = RegrowGRPOTrainer(
            model=model,
            args=args,
            reward_funcs=env_reward,
            train_dataset=episode_slots(len(episodes) // options.group_size),
            processing_class=tokenizer,
            rollout_func=lambda prompts, trainer: rows,
            pair_batches=PairBatches([pair for pair, _ in pairs], len(pairs), micro_batches=accumulation)
            if pairs
            else None,
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
    timed = timer.seconds[1:]  # the first step warms up kernels and allocators
    step_s = statistics.median(timed)
    tokens = sum(len(e.prompt_ids) + len(e.completion_ids) for e in episodes)
    wanted = ("rlvr/grad_norm", "sdpo/grad_norm", "dpo/grad_norm", "sdpo/distilled_tokens", "dpo/pairs")
    clip = {name: value for name, value in metrics.items() if name.startswith("clip_ratio")}
    return {
        "micro_batch_rows": micro,
        "step_s": round(step_s, 4),
        "steps_timed": len(timed),
        "tokens_per_s": round(tokens / step_s, 1),
        "peak_memory_gib": round(peak, 2) if peak is not None else None,
        "trl_clip_ratios": clip,
        **{name: metrics[name] for name in wanted if name in metrics},
    }


def _sampled(run: ShapeRun, episodes: list[EpisodeTokens], vocab: int, options: GpuBenchOptions) -> dict[str, Any]:
    """The model's size and the bf16 sampler's gap; sets each episode's logprobs to the sampler's."""
    model = random_model(run, vocab, options.device, options.seed)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "bf16_sampler": sample_in_bf16(model, episodes, options.device),
    }


def _attempt(work: Callable[[], dict[str, Any]], device: str, what: str) -> dict[str, Any]:
    """What `work` measured, or the error it raised (an out-of-memory too), with what it held freed for the next."""
    try:
        measured = work()
    except Exception as error:
        log.warning("bench gpu: %s failed: %s: %s", what, type(error).__name__, error)
        measured = {"error": {"type": type(error).__name__, "message": str(error)[:2000]}}
    # only once the except block has dropped the traceback are the frames that held the model free
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
    return measured


def _memory_plan(
    run: ShapeRun, episodes: list[EpisodeTokens], vocab: int, mix: str, device: str, rows_at_once: int | None = None
) -> MemoryPlan:
    """`regrow train --plan`'s figure for one step of `mix` over these rows (its capacity left at 0: unused here)."""
    turn = max((end - start for e in episodes for start, end in policy_spans(e.env_mask)), default=1)
    shape = RunShape(
        rows=len(episodes),
        rows_at_once=rows_at_once,
        tokens_per_row=max(len(e.prompt_ids) + len(e.completion_ids) for e in episodes),
        turn_tokens=turn,
        distilled_tokens=max(sum(t.end - t.start for t in e.hinted_turns) for e in episodes),
        lora_r=run.lora_r,
        sdpo_teacher="live" if MIXES[mix].get("alpha_sdpo") else None,
        weight_bytes=2 if run.weights_dtype == "bfloat16" else 4,
        activation_bytes=2 if device == "cuda" else 4,
        on_gpu=device == "cuda",
    )
    return plan_memory(ModelShape.from_config(run.label, shape_config(run, vocab)), shape, 0)


def micro_batch_rows(
    run: ShapeRun, episodes: list[EpisodeTokens], vocab: int, mix: str, options: GpuBenchOptions
) -> int:
    """The rows a forward takes: --micro-batch-rows; on a GPU the most (a divisor of the step's) that the plan fits on
    a GPU of --plan-gpu-gib, as `regrow train` picks them; on a CPU all of them."""
    if options.micro_batch_rows:
        return options.micro_batch_rows
    if options.device != "cuda":
        return len(episodes)
    plan = _memory_plan(run, episodes, vocab, mix, options.device)
    return fitted_plan(
        ModelShape.from_config(run.label, shape_config(run, vocab)), plan.run, options.plan_gpu_gib
    ).run.forward_rows


def _refusal(run: ShapeRun, episodes: list[EpisodeTokens], vocab: int, options: GpuBenchOptions) -> str | None:
    """Why `run` cannot fit this machine's memory by `regrow train --plan`'s arithmetic, or None when it may."""
    import torch

    on_gpu = options.device == "cuda"
    free_gib = torch.cuda.mem_get_info()[0] / GIB if on_gpu else host_memory_gib()[1]
    plans = [_memory_plan(run, episodes, vocab, mix, options.device) for mix in options.mixes]
    plan = max(plans, key=lambda p: p.total_bytes)
    sampler_gib = 2 * plan.parts["weights"] / GIB  # the model and its copy the bf16 sampler is made from
    if on_gpu:
        # a GPU's out-of-memory is caught and recorded, so only what no shorter step avoids is refused here
        held_gib = max(sum(plan.parts.get(part, 0) for part in WEIGHT_PARTS) / GIB, sampler_gib)
        if held_gib <= free_gib:
            return None
        lighter = "a smaller shape" if run.lora_r else f"a LoRA over bf16 weights (--shape {run.shape}:lora16:bf16)"
        return (
            f"{run.label}: its weights, gradients and AdamW state alone take {held_gib:.1f} GiB and the GPU has "
            f"{free_gib:.1f} GiB free: pass {lighter}"
        )
    # on a CPU the kernel kills the process that outgrows the host, with every result measured so far
    needed_gib = max(plan.total_bytes / GIB, sampler_gib)
    if needed_gib <= free_gib:
        return None
    return (
        f"{run.label}: a step of {plan.run.rows} rows of {plan.run.tokens_per_row} tokens needs about "
        f"{needed_gib:.1f} GiB on a CPU by `regrow train --plan`'s arithmetic, and this host has {free_gib:.1f} GiB "
        "available: pass --shape tiny (the same code path, in seconds), or fewer --rows or a smaller --pad-to"
    )


def _measure_shape(run: ShapeRun, recorded: list[EpisodeTokens], options: GpuBenchOptions) -> dict[str, Any]:
    """One shape's entry: refused, failed, or measured with each mix's numbers or error."""
    log.info("bench gpu: %s", run.label)
    entry: dict[str, Any] = {"shape": run.shape, "lora_r": run.lora_r, "weights_dtype": run.weights_dtype}
    episodes = compact_ids(recorded) if run.shape == "tiny" else [e.model_copy(deep=True) for e in recorded]
    tokenizer = stand_in_tokenizer(episodes)
    reason = _refusal(run, episodes, len(tokenizer), options)
    if reason:
        log.warning("bench gpu: %s", reason)
        return entry | {"status": "refused", "reason": reason}
    sampled = _attempt(partial(_sampled, run, episodes, len(tokenizer), options), options.device, run.label)
    if "error" in sampled:
        return entry | {"status": "failed", **sampled}
    entry |= {"status": "measured", **sampled, "mixes": {}}
    for mix in options.mixes:
        measure = partial(_train_mix, run, mix, episodes, tokenizer, options)
        measured = _attempt(measure, options.device, f"{run.label} {mix}")
        if options.device == "cuda" and "error" not in measured:
            plan = _memory_plan(run, episodes, len(tokenizer), mix, options.device, measured["micro_batch_rows"])
            measured["planned_memory_gib"] = round(plan.total_bytes / GIB, 2)
        entry["mixes"][mix] = measured
    timed = {mix: measured.get("step_s") for mix, measured in entry["mixes"].items()}
    if timed.get("rlvr") is not None and timed.get("rlvr+sdpo") is not None:
        entry["sdpo_teacher_s"] = round(timed["rlvr+sdpo"] - timed["rlvr"], 4)
    return entry


def _problems(entry: dict[str, Any]) -> list[str]:
    """One line for each thing asked of a shape that was not measured."""
    label = ShapeRun(entry["shape"], entry["lora_r"], entry["weights_dtype"]).label
    if entry["status"] == "refused":
        return [f"refused {entry['reason']}"]
    failures = [("", entry["error"])] if "error" in entry else []
    failures += [(f" {mix}", m["error"]) for mix, m in entry.get("mixes", {}).items() if "error" in m]
    return [f"{label}{mix}: {error['type']}: {error['message'].splitlines()[0]}" for mix, error in failures]


def _resolved(options: GpuBenchOptions, device: str) -> GpuBenchOptions:
    """`options` with the device and each default that depends on it decided."""
    on_gpu = device == "cuda"
    return replace(
        options,
        device=device,
        shapes=options.shapes or default_shapes(device),
        steps=options.steps or (3 if on_gpu else 1),
        pad_to=(RECIPE_ROW_TOKENS if on_gpu else 0) if options.pad_to is None else options.pad_to,
    )


def run_gpu_bench(options: GpuBenchOptions) -> dict[str, Any]:
    """Per shape and channel mix: step time, tokens/s, peak memory (against the plan's), the bf16 sampler's gap and
    its IS ratio and clip shares, and what the SDPO teacher adds to a step; under "problems", what was not measured
    (a version the trainer was not written for, a shape refused, a shape or a mix that failed). ValueError on bad input.
    """
    started = time.perf_counter()
    unknown = [mix for mix in options.mixes if mix not in MIXES]
    if unknown:
        raise ValueError(f"--mix {unknown[0]!r}: choose among {', '.join(MIXES)}")
    if options.rows % options.group_size:
        raise ValueError(f"--rows {options.rows} is not a whole number of groups of --group-size {options.group_size}")
    if options.micro_batch_rows and options.rows % options.micro_batch_rows:
        raise ValueError(f"--micro-batch-rows {options.micro_batch_rows} does not divide --rows {options.rows}")
    for text in options.shapes:
        ShapeRun.parse(text)  # a misspelt shape fails before anything is measured
    recorded = read_recording(options.recording, options.rows)
    versions = checked_versions()
    mismatches = version_mismatches(versions)
    if mismatches and not options.ignore_versions:  # before torch is imported: it may be the one missing
        return {"versions": versions, "shapes": [], "problems": mismatches}

    import torch

    options = _resolved(options, resolve_device(options.device))
    if options.pad_to:
        recorded = [stretched(episode, options.pad_to) for episode in recorded]
    alternated = rewards_that_train(recorded, options.group_size)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if options.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "recording": str(options.recording),
        "rows": options.rows,
        "group_size": options.group_size,
        "steps": options.steps,
        "pad_to": options.pad_to or None,
        "tokens_per_step": sum(len(e.prompt_ids) + len(e.completion_ids) for e in recorded),
        "policy_tokens_per_step": sum(sum(e.env_mask) for e in recorded),
        "hinted_turns_per_step": sum(len(e.hinted_turns) for e in recorded),
        "dpo_pairs_per_step": options.pairs,
        "groups_given_alternating_rewards": alternated,  # their recorded rewards were all equal: no RLVR gradient
        "versions": versions,
        "shapes": [_measure_shape(ShapeRun.parse(text), recorded, options) for text in options.shapes],
    }
    report["problems"] = [problem for entry in report["shapes"] for problem in _problems(entry)]
    report["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    return report
