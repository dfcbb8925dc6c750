"""`regrow bench train --processes N`: the bench's steps on N CPU processes that torchrun starts (gloo), each training
its share of the batch with its gradients all-reduced, as under `accelerate launch` (or, with `--sharding fsdp`, its
weights sharded: sharded_training.py); the launcher combines what the ranks measured.
`python -m regrow.bench.training_ranks OUT OPTIONS_JSON` is one rank."""

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from regrow.bench.options import TrainBenchOptions

# A bench of a real model on a CPU takes minutes a step; past this the ranks are taken to hang.
RANKS_TIMEOUT_S = 3600


def run_ranked_train_bench(options: TrainBenchOptions) -> dict:
    """`run_train_bench(options)` split over `options.processes` ranks: a step's time is its slowest rank's (the
    all-reduce waits for it), and `ranks_in_sync` says whether every rank ended with the same weights."""
    processes = options.processes
    threads = max(1, (os.cpu_count() or 1) // processes)
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(processes),
            "-m",
            "regrow.bench.training_ranks",
            out,
            json.dumps(dataclasses.asdict(options)),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=RANKS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"the {processes} bench processes ran past {RANKS_TIMEOUT_S} s; try fewer steps"
            ) from None
        if done.returncode != 0:
            raise RuntimeError(
                f"the {processes} bench processes failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
            )
        ranks = [json.loads((Path(out) / f"rank{rank}.json").read_text()) for rank in range(processes)]
    return combined(ranks, threads)


def combined(ranks: list[dict], threads: int) -> dict:
    """One report from every rank's: rank 0's batch figures, the steps timed at their slowest rank."""
    steps = {
        kind: [max(times) for times in zip(*(rank["step_times_s"][kind] for rank in ranks))]
        for kind in ("grpo", "three_channel")
    }
    plain_s, three_s = statistics.median(steps["grpo"]), statistics.median(steps["three_channel"])
    return {
        **ranks[0],
        "threads_per_process": threads,
        "step_times_s": steps,
        "grpo_step_s": round(plain_s, 4),
        "three_channel_step_s": round(three_s, 4),
        "three_channel_vs_grpo": round(three_s / plain_s, 3),
        "ranks_in_sync": len({rank["weights_digest"] for rank in ranks}) == 1,
        "peak_rss_gib": round(sum(rank["peak_rss_gib"] for rank in ranks), 2),  # the host's, all ranks together
        "per_process": [
            {key: rank[key] for key in ("grpo_step_s", "three_channel_step_s", "peak_rss_gib", "weights_digest")}
            for rank in ranks
        ],
    }


def main(out: str, options: str) -> None:
    from regrow.bench.sharded_training import run_sharded_train_bench
    from regrow.bench.training import run_train_bench

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    parsed = TrainBenchOptions(**json.loads(options))
    run = run_sharded_train_bench if parsed.sharding == "fsdp" else run_train_bench
    result = run(parsed, rank, world)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:3])
