"""`regrow bench sampling`: tokens a second of the transformers turn sampler on this machine's CPU, alone and beside
busy processes (what an env server's test runs are to a trainer on the same box), under each OpenMP wait policy.

OpenMP reads its wait policy when torch loads, so each measurement runs in a fresh interpreter (`python -m
regrow.bench.sampling PROBE_JSON`), which prints one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from regrow.bench.training import bench_model

# A core's worth of pure Python: it never sleeps, as a test run in a sandbox mostly does not.
BUSY_LOOP = "while True: pass"
PROBE_TIMEOUT_S = 1800


def run_sampling_bench(
    model: str, busy: list[int], policies: list[str], batch: int, context: int, new_tokens: int, threads: int
) -> dict[str, Any]:
    """Per (wait policy, busy processes): tokens a second of one `generate_batch` of `batch` rows of `context` tokens,
    `new_tokens` each, after a warm-up batch."""
    probe = {"model": model, "batch": batch, "context": context, "new_tokens": new_tokens, "threads": threads}
    runs = [
        {"wait_policy": policy, "busy_processes": count, **_probe_beside(probe, policy, count)}
        for count in busy
        for policy in policies
    ]
    return {"bench": "sampling", "cpus": os.cpu_count(), **probe, "runs": runs}


def _probe_beside(probe: dict[str, Any], policy: str, busy: int) -> dict[str, Any]:
    """One probe in a fresh interpreter under `policy`, with `busy` spinning processes beside it for its whole run."""
    spinners = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, json.dumps(probe)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={**os.environ, "OMP_WAIT_POLICY": policy},
        )
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    if done.returncode != 0:
        raise RuntimeError(f"the sampling probe failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(model: str, batch: int, context: int, new_tokens: int, threads: int) -> dict[str, Any]:
    """Tokens a second of one timed batch in this interpreter (the probe's side)."""
    import torch

    from trainer_client.rollout.hf_sampler import HFTurnSampler

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    policy, tokenizer = bench_model(model)
    policy.eval()
    # No stop token: every row writes all its tokens, so runs compare the same work. No turn cache: the warm-up's
    # contexts are the timed ones, and the figure is a whole turn's, its prefill included.
    sampler = HFTurnSampler(policy, tokenizer.pad_token_id or 0, stop_ids=[], cached_turns=0)
    ids = [[100 + (row * 7 + i) % 1000 for i in range(context)] for row in range(batch)]
    sampler.generate_batch(ids, [8] * batch)  # warm-up: first-call allocations stay out of the figure
    started = time.monotonic()
    turns = sampler.generate_batch(ids, [new_tokens] * batch)
    elapsed = time.monotonic() - started
    written = sum(len(turn.ids) for turn in turns)
    return {"seconds": round(elapsed, 3), "tokens": written, "tokens_per_s": round(written / elapsed, 2)}


if __name__ == "__main__":
    arguments = json.loads(sys.argv[1])
    print(json.dumps(measure(**arguments)))
