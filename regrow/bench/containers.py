"""`regrow bench sandbox` and `regrow bench proxy`: what a warm pool, our exec wrapper and the socket proxy cost."""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

from env_server.observability.live_stats import percentile
from sandbox import DockerBackend, DockerSandbox
from sandbox.errors import DockerUnavailable
from sandbox.lifecycle.base_image import BASE_IMAGE
from sandbox.lifecycle.warm_pool import WarmPool

BENCH_LABELS = {"regrow.bench": "sandbox"}


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    p50, p95 = percentile(samples_s, 0.5), percentile(samples_s, 0.95)
    assert p50 is not None and p95 is not None  # every timed loop runs at least once
    # Four decimals: a warm acquire takes microseconds, and two would round it to zero.
    return {"p50_ms": round(p50 * 1000, 4), "p95_ms": round(p95 * 1000, 4)}


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run_sandbox_bench(backend: DockerBackend, repetitions: int = 30, image: str = BASE_IMAGE) -> dict:
    """Measure (a) CLI run, (b) SDK create+start, (c) warm acquire, (d) SDK exec, (e) our exec."""
    labels = {**BENCH_LABELS, "regrow.managed": "1", "regrow.owner": backend.owner}
    cli_run = [
        _timed(
            lambda: subprocess.run(
                ["docker", "run", "--rm", "--label", "regrow.bench=sandbox", image, "true"],
                check=True,
                capture_output=True,
            )
        )
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

    figures: dict[str, Any] = {
        "repetitions": repetitions,
        "image": image,
        "a_cli_docker_run": _percentiles(cli_run),
        "b_sdk_create_start": _percentiles(sdk_create),
        "c_warm_pool_acquire": _percentiles(warm),
        "d_sdk_exec_run": _percentiles(sdk_exec),
        "e_sandbox_exec": _percentiles(our_exec),
    }
    figures["warm_acquire_vs_create"] = round(statistics.median(warm) / statistics.median(sdk_create), 8)
    figures["exec_overhead"] = round(figures["e_sandbox_exec"]["p50_ms"] / figures["d_sdk_exec_run"]["p50_ms"], 4)
    figures["targets_met"] = figures["warm_acquire_vs_create"] <= 0.25 and figures["exec_overhead"] <= 1.25
    return figures


def _serve_proxy(listen: str) -> None:
    import asyncio

    from sandbox.proxy.server import ProxySettings, serve

    asyncio.run(serve(ProxySettings(listen=listen)))


def _proxied_backend(url: str, process: multiprocessing.process.BaseProcess) -> DockerBackend:
    deadline = time.monotonic() + 30
    while True:
        try:
            return DockerBackend(base_url=url)
        except DockerUnavailable:
            if not process.is_alive() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def run_proxy_bench(repetitions: int = 30, image: str = BASE_IMAGE) -> dict:
    """Sandbox exec("true") and create+destroy, straight to the engine and through the proxy in its own process."""
    direct = DockerBackend()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    process = multiprocessing.get_context("spawn").Process(target=_serve_proxy, args=(url,), daemon=True)
    process.start()
    try:
        proxied = _proxied_backend(url, process)
        exec_direct: list[float] = []
        exec_proxied: list[float] = []
        with direct.create(image, labels=BENCH_LABELS) as sandbox:
            through_proxy = DockerSandbox(proxied.api, sandbox.id, sandbox.limits, sandbox.user, proxied.remove)
            for _ in range(3):  # warm both paths
                sandbox.exec("true")
                through_proxy.exec("true")
            for _ in range(repetitions):  # interleaved, so drift hits both alike
                exec_direct.append(_timed(lambda: sandbox.exec("true")))
                exec_proxied.append(_timed(lambda: through_proxy.exec("true")))
        create_direct: list[float] = []
        create_proxied: list[float] = []
        for _ in range(max(5, repetitions // 3)):
            create_direct.append(_timed(lambda: direct.create(image, labels=BENCH_LABELS).destroy()))
            create_proxied.append(_timed(lambda: proxied.create(image, labels=BENCH_LABELS).destroy()))
    finally:
        process.terminate()
        process.join(10)
    figures: dict = {
        "repetitions": repetitions,
        "image": image,
        "exec_direct": _percentiles(exec_direct),
        "exec_proxied": _percentiles(exec_proxied),
        "create_destroy_direct": _percentiles(create_direct),
        "create_destroy_proxied": _percentiles(create_proxied),
    }
    figures["exec_overhead"] = round(figures["exec_proxied"]["p50_ms"] / figures["exec_direct"]["p50_ms"], 4)
    figures["create_destroy_overhead"] = round(
        figures["create_destroy_proxied"]["p50_ms"] / figures["create_destroy_direct"]["p50_ms"], 4
    )
    figures["target_met"] = figures["exec_overhead"] <= 1.15
    return figures
