"""`regrow bench gpu`, also runnable alone as `python -m regrow.gpu_check` on a GPU box that has torch, transformers,
accelerate and peft but not the rest of regrow's dependencies (the env server's, the synthesizer's): this imports only
the trainer's side (proto, trainer_client), TRL and typer."""

from __future__ import annotations

from pathlib import Path

import typer

from regrow.bench_report import AS_JSON, report
from regrow.benchmarks.gpu_replay import RECIPE_ROW_TOKENS
from regrow.output import fail


def bench_gpu(
    shape: list[str] = typer.Option(
        None,
        "--shape",
        help="A shipped model shape (trainer_client/train/model_shapes, or 'tiny'), optionally :lora<r> and :bf16 "
        "(weights); repeat. Default: on a GPU qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b:lora16:bf16; on a CPU tiny. A "
        "shape the memory plan says cannot fit is refused before anything is allocated.",
    ),
    mix: list[str] = typer.Option(
        None, "--mix", help="Channel mix: rlvr, rlvr+sdpo, rlvr+dpo, all; repeat. Default: all four."
    ),
    tokens: Path = typer.Option(
        None, "--tokens", help="A `regrow train --record-tokens` file (episode_tokens.jsonl). Default: the shipped one."
    ),
    rows: int = typer.Option(8, min=2, help="Recorded episodes in one step."),
    group_size: int = typer.Option(4, min=2, help="Episodes per GRPO group."),
    steps: int = typer.Option(
        None, min=1, help="Timed optimizer steps per mix, after one warm-up step. Default: 3 on a GPU, 1 on a CPU."
    ),
    pairs: int = typer.Option(4, min=1, help="DPO pairs per step."),
    pad_to: int = typer.Option(
        None,
        min=0,
        help="Stretch each recorded row to about this many tokens (prompt and completion) by repeating its turns; 0 "
        f"keeps the recording's length. Default: on a GPU {RECIPE_ROW_TOKENS}, a row of the gpu-1x80gb recipe (its "
        "completion tokens after the prompt --plan assumes); on a CPU the recording's.",
    ),
    device: str = typer.Option("auto", help="auto (a GPU when torch sees one), cuda or cpu."),
    ignore_versions: bool = typer.Option(
        False,
        "--ignore-versions",
        help="Measure even when torch, transformers, trl, peft or accelerate differ from "
        "the versions regrow's trainer needs (pyproject.toml's train extra).",
    ),
    as_json: bool = AS_JSON,
) -> None:
    """The trainer's step on recorded token batches with random-init models of real shapes, no env: step time,
    tokens/s, peak memory against the plan, the bf16 sampler's logprob gap, IS ratio and clip shares, SDPO's cost.
    Whatever fails or is refused is recorded under "problems" and the run goes on; the exit status is then 1."""
    from regrow.benchmarks.gpu import GpuBenchOptions, run_gpu_bench
    from regrow.benchmarks.gpu_replay import MIXES, RECORDING

    options = GpuBenchOptions(
        recording=tokens or RECORDING,
        shapes=tuple(shape or ()),
        mixes=tuple(mix or MIXES),
        rows=rows,
        group_size=group_size,
        steps=steps,
        pairs=pairs,
        device=device,
        pad_to=pad_to,
        ignore_versions=ignore_versions,
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


if __name__ == "__main__":
    typer.run(bench_gpu)
