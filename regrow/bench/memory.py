"""`regrow bench memory`: the memory plan (`regrow train --plan`) held against the peak of real CPU training steps.

Each shape's steps run in a fresh spawned process, so that the peak is the step's own. The measure is the process's
resident memory: its peak (VmHWM) less its resident set just before the model loads (VmRSS), with torch,
transformers and TRL imported and one tiny backward already run. Resident memory is what the kernel kills a process
for and what MemAvailable, which `check_memory` holds a CPU run against, counts; torch's CPU allocator keeps no cache
of its own, so a freed tensor leaves it. The baseline is what the plan leaves out of its modelled terms (the
interpreter, torch's own libraries and their first kernels) and is reported beside the plan's fixed allowance for it.
"""

from __future__ import annotations

import gc
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from regrow.bench.options import MemoryBenchOptions
from trainer_client.train.memory_plan import GIB, MemoryPlan, ModelShape, RunShape, plan_memory

TOLERANCE = 0.15  # the contract: the plan within 15% of the measured peak, either way


class MeasuredSteps(BaseModel):
    """What one child process measured, in bytes of resident memory, and the shape of what it trained."""

    baseline_bytes: int  # before the model loads: the interpreter and libraries
    loaded_bytes: int  # with the model loaded and the trainer built, before the first step
    peak_bytes: int  # the highest it reached over every step
    backward_peak_bytes: int  # the highest over the steps' forward and backward passes
    optimizer_peak_bytes: int  # the highest over the optimizer updates (AdamW's state is made in the first)
    tokens_per_row: int
    turn_tokens: int
    config: dict[str, Any]
    step_s: list[float]


def resident_bytes(field: str) -> int:
    """One of this process's /proc/self/status figures (VmRSS, VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) * 1024  # the kernel writes kB
    raise RuntimeError(f"/proc/self/status has no {field}: the memory bench reads Linux's procfs")


def reset_peak() -> None:
    """Start VmHWM again from the current resident set (Linux 4.0+: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def _warm_libraries() -> None:
    """Import what the step uses and run one tiny backward, so the baseline holds the libraries' own memory."""
    import torch
    import transformers  # noqa: F401
    import trl  # noqa: F401

    import trainer_client.train.grpo_trainer  # noqa: F401

    weight = torch.ones(64, 64, requires_grad=True)
    torch.nn.functional.scaled_dot_product_attention(weight[None, None], weight[None, None], weight[None, None]).sum()
    (weight @ weight).sum().backward()
    gc.collect()


def _release_freed_heap() -> None:
    """Hand the heap the load and the trainer's set-up freed back to the kernel, so it is not counted as held."""
    import ctypes

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure_steps(model_spec: str, rows: int, turns: int, steps: int) -> MeasuredSteps:
    """Train `steps` plain GRPO steps of `rows` synthetic rows of `turns` turns and record resident memory (run it in a
    fresh process: the peak is the process's)."""
    import torch

    from regrow.bench.training import TURN_TOKENS, bench_model, bench_trainer
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer
    from trainer_client.rollout.rows import EPISODE_SLOT

    _warm_libraries()
    torch.manual_seed(0)
    baseline = resident_bytes("VmRSS")
    model, tokenizer = bench_model(model_spec)
    tokens = EpisodeTokenizer(tokenizer)
    trajectories = padded_batch(tokens, rows, turns)
    slots = [{"prompt": EPISODE_SLOT} for _ in trajectories]
    config = model.config.to_dict()
    with tempfile.TemporaryDirectory() as workdir:
        trainer = bench_trainer(model, tokenizer, trajectories, tokens, [], Path(workdir))
        del model  # the trainer trains its own copy
        _release_freed_heap()
        loaded = resident_bytes("VmRSS")
        backward, optimizer, times = 0, 0, []
        for _ in range(steps):
            start = time.perf_counter()
            reset_peak()
            trainer.training_step(trainer.model_wrapped, slots, None)
            backward = max(backward, resident_bytes("VmHWM"))
            reset_peak()
            trainer.optimizer.step()
            trainer.optimizer.zero_grad()
            optimizer = max(optimizer, resident_bytes("VmHWM"))
            times.append(round(time.perf_counter() - start, 2))
    return MeasuredSteps(
        baseline_bytes=baseline,
        loaded_bytes=loaded,
        peak_bytes=max(backward, optimizer),
        backward_peak_bytes=backward,
        optimizer_peak_bytes=optimizer,
        tokens_per_row=len(trajectories[0].prompt_ids) + len(trajectories[0].completion_ids),
        turn_tokens=TURN_TOKENS,
        config=config,
        step_s=times,
    )


def padded_batch(tokens: Any, rows: int, turns: int) -> list:
    """Synthetic rows, every other one a quarter of its turns short, so that the batch is left-padded as a real one
    is (an attention mask, whose size the plan counts) and the first row is the longest (the trainer's length)."""
    from regrow.bench.training import synthetic_trajectories

    full = synthetic_trajectories(tokens, rows, turns, hinted_share=0.0)
    short = synthetic_trajectories(tokens, rows, max(1, turns * 3 // 4), hinted_share=0.0)
    return [full[row] if row % 2 == 0 else short[row] for row in range(rows)]


def measured_in_child(model_spec: str, rows: int, turns: int, steps: int) -> MeasuredSteps:
    """`measure_steps` in a freshly spawned process of its own."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(measure_steps, model_spec, rows, turns, steps).result()


def planned_step(measured: MeasuredSteps, rows: int, name: str) -> MemoryPlan:
    """The plan of the step that was measured: its rows at its length, in fp32 on a CPU."""
    run = RunShape(
        rows=rows,
        tokens_per_row=measured.tokens_per_row,
        turn_tokens=measured.turn_tokens,
        activation_bytes=4,
        on_gpu=False,
    )
    return plan_memory(ModelShape.from_config(name, measured.config), run, capacity_gib=0)


def parsed_shape(text: str) -> tuple[int, int]:
    """(rows, turns) of a shape written ROWSxTURNS, e.g. 2x8: rows an even number (groups of 2), turns at least 1."""
    rows, separator, turns = text.lower().partition("x")
    if not (separator and rows.isdigit() and turns.isdigit() and int(rows) % 2 == 0 and int(rows) and int(turns)):
        raise ValueError(f"--shape {text!r}: write ROWSxTURNS, e.g. 2x8, with an even number of rows (groups of 2)")
    return int(rows), int(turns)


def compared(plan: MemoryPlan, measured: MeasuredSteps) -> dict:
    """The plan beside the measured peak, both less what the plan leaves out of its modelled terms."""
    planned = plan.modelled_bytes
    peak = measured.peak_bytes - measured.baseline_bytes
    return {
        "tokens_per_row": measured.tokens_per_row,
        "planned_gib": round(planned / GIB, 3),
        "measured_gib": round(peak / GIB, 3),
        "planned_over_measured": round(planned / peak, 3),
        "within_tolerance": abs(planned / peak - 1) <= TOLERANCE,
        "loaded_gib": round((measured.loaded_bytes - measured.baseline_bytes) / GIB, 3),
        "backward_peak_gib": round((measured.backward_peak_bytes - measured.baseline_bytes) / GIB, 3),
        "optimizer_peak_gib": round((measured.optimizer_peak_bytes - measured.baseline_bytes) / GIB, 3),
        "plan_parts_gib": {name: round(value / GIB, 3) for name, value in plan.parts.items()},
        "baseline_gib": round(measured.baseline_bytes / GIB, 3),
        "step_s": measured.step_s,
    }


def run_memory_bench(options: MemoryBenchOptions) -> dict:
    """Per shape: the plan's figure, the measured peak a training step adds, and their ratio (within 15%?)."""
    shapes = [parsed_shape(text) for text in options.shape]
    results = []
    for rows, turns in shapes:
        measured = measured_in_child(options.model, rows, turns, options.steps)
        plan = planned_step(measured, rows, options.model)
        results.append({"rows": rows, "turns": turns, **compared(plan, measured)})
    return {
        "model": options.model,
        "device": "cpu",
        "measure": "peak RSS (VmHWM) less RSS before the model loaded, fresh process a shape",
        "steps": options.steps,
        "tolerance": TOLERANCE,
        "shapes": results,
        "all_within_tolerance": all(result["within_tolerance"] for result in results),
    }
