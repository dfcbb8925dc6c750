"""`regrow bench sandbox`: what a warm pool and our exec wrapper cost next to raw Docker."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable

from sandbox.base_image import BASE_IMAGE
from sandbox.docker_backend import DockerBackend
from sandbox.warm_pool import WarmPool

BENCH_LABELS = {"regrow.bench": "sandbox"}


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    p95_index = min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2), "p95_ms": round(ordered[p95_index] * 1000, 2)}


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run_sandbox_bench(backend: DockerBackend, repetitions: int = 30, image: str = BASE_IMAGE) -> dict:
    """Measure (a) CLI run, (b) SDK create+start, (c) warm acquire, (d) SDK exec, (e) our exec."""
    labels = {**BENCH_LABELS, "regrow.managed": "1", "regrow.owner": backend.owner}
    cli_run = [
        _timed(lambda: subprocess.run(["docker", "run", "--rm", "--label", "regrow.bench=sandbox", image, "true"], check=True, capture_output=True))
        for _ in range(repetitions)
    ]
    sdk_create: list[float] = []
    for _ in range(repetitions):
        started = time.perf_counter()
        container = backend.client.containers.create(image, ["sleep", "infinity"], labels=labels)
        container.start()
        sdk_create.append(time.perf_counter() - started)
        container.remove(force=True)

    warm: list[float] = []
    with WarmPool(backend, image, size=2, labels=BENCH_LABELS) as pool:
        for _ in range(repetitions):
            pool.wait_ready()
            started = time.perf_counter()
            sandbox = pool.acquire()
            warm.append(time.perf_counter() - started)
            sandbox.destroy()

    sdk_exec: list[float] = []
    our_exec: list[float] = []
    with backend.create(image, labels=BENCH_LABELS) as sandbox:
        container = backend.client.containers.get(sandbox.id)
        for _ in range(3):  # warm the connection pool and page cache for both paths
            container.exec_run("true")
            sandbox.exec("true")
        for _ in range(repetitions):  # interleaved, so drift hits both alike
            sdk_exec.append(_timed(lambda: container.exec_run("true")))
            our_exec.append(_timed(lambda: sandbox.exec("true")))

    figures = {
        "repetitions": repetitions,
        "image": image,
        "a_cli_docker_run": _percentiles(cli_run),
        "b_sdk_create_start": _percentiles(sdk_create),
        "c_warm_pool_acquire": _percentiles(warm),
        "d_sdk_exec_run": _percentiles(sdk_exec),
        "e_sandbox_exec": _percentiles(our_exec),
    }
    figures["warm_acquire_vs_create"] = round(figures["c_warm_pool_acquire"]["p50_ms"] / figures["b_sdk_create_start"]["p50_ms"], 4)
    figures["exec_overhead"] = round(figures["e_sandbox_exec"]["p50_ms"] / figures["d_sdk_exec_run"]["p50_ms"], 4)
    figures["targets_met"] = figures["warm_acquire_vs_create"] <= 0.25 and figures["exec_overhead"] <= 1.25
    return figures
