"""`regrow bench gpu`, also runnable alone as `python -m regrow.gpu_check` on a GPU box that has torch, transformers,
accelerate and peft but not the rest of regrow's dependencies (the env server's, the synthesizer's): this imports only
the trainer's side (proto, trainer_client), TRL and typer."""

from __future__ import annotations

from pathlib import Path

import typer

from regrow.bench_report import AS_JSON, report
from regrow.output import fail


def bench_gpu(
    shape: list[str] = typer.Option(
        None,
        "--shape",
        help="A shipped model shape (trainer_client/train/model_shapes, or 'tiny'), optionally :lora<r> and :bf16 "
        "(weights); repeat. Default: qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b:lora16:bf16.",
    ),
    mix: list[str] = typer.Option(
        None, "--mix", help="Channel mix: rlvr, rlvr+sdpo, rlvr+dpo, all; repeat. Default: all four."
    ),
    tokens: Path = typer.Option(
        None, "--tokens", help="A `regrow train --record-tokens` file (episode_tokens.jsonl). Default: the shipped one."
    ),
    rows: int = typer.Option(8, min=2, help="Recorded episodes in one step."),
    group_size: int = typer.Option(4, min=2, help="Episodes per GRPO group."),
    steps: int = typer.Option(3, min=1, help="Timed optimizer steps per mix, after one warm-up step."),
    pairs: int = typer.Option(4, min=1, help="DPO pairs per step."),
    device: str = typer.Option("auto", help="auto (a GPU when torch sees one), cuda or cpu."),
    as_json: bool = AS_JSON,
) -> None:
    """The trainer's step on recorded token batches with random-init models of real shapes, no env: step time,
    tokens/s, peak memory against the plan, the bf16 sampler's logprob gap, IS ratio and clip shares, SDPO's cost."""
    from regrow.benchmarks.gpu import run_gpu_bench
    from regrow.benchmarks.gpu_replay import DEFAULT_SHAPES, MIXES, RECORDING

    try:
        result = run_gpu_bench(
            tokens or RECORDING,
            shape or list(DEFAULT_SHAPES),
            mix or list(MIXES),
            rows,
            group_size,
            steps,
            pairs,
            device,
        )
    except (ValueError, RuntimeError) as error:  # bad input, or no CUDA device for --device cuda
        fail(str(error))
    report(result, as_json)


if __name__ == "__main__":
    typer.run(bench_gpu)
