"""`regrow bench gpu`, also runnable alone as `python -m regrow.bench.gpu_check` on a GPU box that has torch,
transformers, accelerate and peft but not the rest of regrow's dependencies (the env server's, the synthesizer's): this
imports only the trainer's side (proto, trainer_client), TRL and typer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from regrow.bench.gpu_replay import RECIPE_ROW_TOKENS
from regrow.bench.options import bench_command
from regrow.bench.report import report
from regrow.output import fail


@dataclass(frozen=True)
class GpuBenchArguments:
    """What `regrow bench gpu` is given, as typed: the shapes, mixes and recording to replay, and the step's size."""

    shape: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="A shipped model shape (trainer_client/train/model_shapes, or 'tiny'), optionally :lora<r> and :bf16 "
            "(weights); repeat. Default: on a GPU qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b:lora16:bf16; on a CPU tiny. "
            "A shape the memory plan says cannot fit is refused before anything is allocated.",
        ),
    ] = None
    mix: Annotated[
        list[str] | None,
        typer.Option("--mix", help="Channel mix: rlvr, rlvr+sdpo, rlvr+dpo, all; repeat. Default: all four."),
    ] = None
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens", help="A `regrow train --record-tokens` file (episode_tokens.jsonl). Default: the shipped one."
        ),
    ] = None
    rows: Annotated[int, typer.Option(min=2, help="Recorded episodes in one step.")] = 8
    group_size: Annotated[int, typer.Option(min=2, help="Episodes per GRPO group.")] = 4
    steps: Annotated[
        int | None,
        typer.Option(
            min=1, help="Timed optimizer steps per mix, after one warm-up step. Default: 3 on a GPU, 1 on a CPU."
        ),
    ] = None
    pairs: Annotated[int, typer.Option(min=1, help="DPO pairs per step.")] = 4
    pad_to: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Stretch each recorded row to about this many tokens (prompt and completion) by repeating its turns; "
            f"0 keeps the recording's length. Default: on a GPU {RECIPE_ROW_TOKENS}, a row of the gpu-1x80gb recipe "
            "(its completion tokens after the prompt --plan assumes); on a CPU the recording's.",
        ),
    ] = None
    micro_batch_rows: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Rows in one forward and backward, accumulated over the step (a divisor of --rows). Default: on a "
            "GPU the most that `regrow train --plan` fits on a GPU of --plan-gpu-gib; on a CPU all of them.",
        ),
    ] = None
    plan_gpu_gib: Annotated[
        float, typer.Option(min=1, help="The GPU memory the default micro-batches are fitted to: the recipes' cards.")
    ] = 80.0
    device: Annotated[str, typer.Option(help="auto (a GPU when torch sees one), cuda or cpu.")] = "auto"
    ignore_versions: Annotated[
        bool,
        typer.Option(
            "--ignore-versions",
            help="Measure even when torch, transformers, trl, peft or accelerate differ from "
            "the versions regrow's trainer needs (pyproject.toml's train extra).",
        ),
    ] = False


def run_bench_gpu(arguments: GpuBenchArguments, as_json: bool | None) -> None:
    """The trainer's step on recorded token batches with random-init models of real shapes, no env: step time,
    tokens/s, peak memory against the plan, the bf16 sampler's logprob gap, IS ratio and clip shares, SDPO's cost.
    Whatever fails or is refused is recorded under "problems" and the run goes on; the exit status is then 1."""
    from regrow.bench.gpu import GpuBenchOptions, run_gpu_bench
    from regrow.bench.gpu_replay import MIXES, RECORDING

    options = GpuBenchOptions(
        recording=arguments.tokens or RECORDING,
        shapes=tuple(arguments.shape or ()),
        mixes=tuple(arguments.mix or MIXES),
        rows=arguments.rows,
        group_size=arguments.group_size,
        steps=arguments.steps,
        pairs=arguments.pairs,
        device=arguments.device,
        pad_to=arguments.pad_to,
        micro_batch_rows=arguments.micro_batch_rows,
        plan_gpu_gib=arguments.plan_gpu_gib,
        ignore_versions=arguments.ignore_versions,
    )
    try:
        result = run_gpu_bench(options)
    except (ValueError, RuntimeError) as error:  # bad input, or no CUDA device for --device cuda
        fail(str(error))
    report(result, as_json)
    problems = result["problems"]
    if problems:
        more = f" (and {len(problems) - 1} more under the report's problems)" if len(problems) > 1 else ""
        fail(f"bench gpu: {problems[0]}{more}")


bench_gpu = bench_command(GpuBenchArguments, run_bench_gpu)

if __name__ == "__main__":
    typer.run(bench_gpu)
