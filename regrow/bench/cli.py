"""`regrow bench ...`: every benchmark's command, printing its numbers as JSON or as a table."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, cast

import typer

from regrow.bench.gpu_check import bench_gpu
from regrow.bench.options import (
    LoadBenchOptions,
    MemoryBenchOptions,
    RolloutBenchOptions,
    TrainBenchOptions,
    bench_command,
)
from regrow.bench.report import AS_JSON, report
from regrow.output import console, fail
from task_synth.cli import MODES_HELP, progress_bars, synth_settings


def bench_proxy(
    repetitions: int = typer.Option(30, min=5, help="Repetitions of each measurement."),
    as_json: bool = AS_JSON,
) -> None:
    """Sandbox exec and create+destroy p50/p95 in ms, straight to the engine and through `regrow sandbox proxy`."""
    from regrow.bench.containers import run_proxy_bench
    from sandbox import SandboxError

    try:
        report(run_proxy_bench(repetitions), as_json)
    except SandboxError as error:
        fail(str(error))


def bench_corpus(
    only: list[str] = typer.Option(
        None, "--only", help="Corpus repository to run (its PyPI name); repeat for several. Default: all."
    ),
    max_tasks: int = typer.Option(2, "--max-tasks", min=1, help="Tasks to make per repository."),
    max_candidates: int = typer.Option(8, "--max-candidates", min=1, help="Candidates to try per repository at most."),
    cache_dir: Path = typer.Option(
        None, "--cache-dir", help="Where sdists and wheelhouses are cached (default REGROW_SYNTH_CACHE_DIR)."
    ),
    seed: int = typer.Option(0),
    as_json: bool = AS_JSON,
) -> None:
    """Synthesis on the pinned corpus of real PyPI sdists: per repo tests, candidates, yield and errors."""
    from regrow.bench.corpus import run_corpus_bench, select
    from sandbox import SandboxError
    from task_synth.cli import stop_on_sigterm
    from task_synth.errors import SynthError

    stop_on_sigterm()  # a killed bench removes its sandboxes as `regrow synth` does

    settings = synth_settings(
        max_tasks=max_tasks, max_candidates=max_candidates, cache_dir=cache_dir, seed=seed, jobs=1
    )
    try:
        repos = select(only)
    except SynthError as error:
        fail(str(error))
    progress, _, repositories = progress_bars(console)
    try:
        with progress:
            result = run_corpus_bench(
                settings, repos, on_repo=lambda name, done, total: repositories(done, total, name)
            )
    except SandboxError as error:
        fail(str(error))
    report(result, as_json)


@dataclass(frozen=True)
class SynthBenchOptions:
    """What `regrow bench synth` runs: one repository, the run's settings, and how many candidates to compare."""

    source: Annotated[str | None, typer.Argument(help="Local path or git URL of the repository (or use --repo).")] = (
        None
    )
    repo: Annotated[
        str | None,
        typer.Option(
            "--repo", help="An sdist (.tar.gz or .zip), a PyPI requirement pinned with ==, or a path or git URL."
        ),
    ] = None
    kind: Annotated[
        list[str] | None, typer.Option("--kind", help="Kinds of unit to delete; repeat; default every kind.")
    ] = None
    max_tasks: Annotated[int, typer.Option("--max-tasks", min=1, help="Valid tasks the measured run makes.")] = 10
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Candidates validated in parallel.")] = 2
    compare_naive: Annotated[
        int,
        typer.Option(
            "--compare-naive",
            min=0,
            help="Also validate this many candidates both coverage-guided and naively (whole suite) and compare.",
        ),
    ] = 0
    mode: Annotated[list[str], typer.Option("--mode", help=MODES_HELP)] = field(
        default_factory=lambda: ["stub", "remove", "file"]
    )
    seed: int = 0
    ref: str | None = None
    test_cmd: Annotated[str | None, typer.Option("--test-cmd")] = None


def bench_synth(options: SynthBenchOptions, as_json: bool | None) -> None:
    """Valid tasks per hour and the time per stage of one whole run; optionally guided against naive validation."""
    from regrow.bench import corpus
    from regrow.bench.synthesis import run_synth_bench, run_throughput_bench
    from sandbox import SandboxError
    from task_synth.cli import stop_on_sigterm
    from task_synth.errors import SynthError

    stop_on_sigterm()  # a killed bench removes its sandboxes as `regrow synth` does

    source, repo = options.source, options.repo
    if (source is None) == (repo is None):
        fail("give the repository as SOURCE or as --repo, not both and not neither")
    settings = synth_settings(
        ref=options.ref,
        modes=options.mode,
        kinds=options.kind or None,
        seed=options.seed,
        test_command=options.test_cmd,
        max_tasks=options.max_tasks,
        jobs=options.jobs,
    )
    progress, update, _ = progress_bars(console)
    try:
        with tempfile.TemporaryDirectory(prefix="regrow-bench-sdist-") as scratch:
            source = source or corpus.repo_source(cast(str, repo), settings.cache_dir, Path(scratch))  # one is given
            with progress:
                result = run_throughput_bench(source, settings, on_progress=update)
                if options.compare_naive:
                    compared = run_synth_bench(source, settings, options.compare_naive, on_progress=update)
                    result["guided_vs_naive"] = compared
    except (SynthError, SandboxError) as error:
        fail(str(error))
    report(result, as_json)


def bench_pytest_fork(
    repo: str = typer.Option(..., "--repo", help="An sdist, a PyPI requirement pinned with ==, or a path or git URL."),
    runs: int = typer.Option(20, min=3, help="Runs each way, alternating."),
    as_json: bool = AS_JSON,
) -> None:
    """Seconds per test run in a validation sandbox: through its pytest fork server against a fresh pytest."""
    from regrow.bench import corpus
    from regrow.bench.synthesis import run_fork_bench
    from sandbox import SandboxError
    from task_synth.errors import SynthError

    settings = synth_settings(max_tasks=1)
    try:
        with tempfile.TemporaryDirectory(prefix="regrow-bench-sdist-") as scratch:
            result = run_fork_bench(corpus.repo_source(repo, settings.cache_dir, Path(scratch)), settings, runs)
    except (SynthError, SandboxError, RuntimeError) as error:
        fail(str(error))
    report(result, as_json)


def bench_grade(
    tasks: Path = typer.Option(..., "--tasks", exists=True, file_okay=False, help="Task store directory."),
    repetitions: int = typer.Option(5, min=1, help="Gradings (and bare runs) per task."),
    max_tasks: int = typer.Option(3, min=1, help="Tasks measured, in id order."),
    as_json: bool = AS_JSON,
) -> None:
    """Grading each task's own solution with every defence on, against a bare pytest run of the same tests."""
    from regrow.bench.grading import run_grade_bench
    from sandbox import SandboxError

    try:
        report(run_grade_bench(tasks, repetitions, max_tasks), as_json)
    except SandboxError as error:
        fail(str(error))


def bench_mutants(
    tasks: Path = typer.Option(..., "--tasks", exists=True, file_okay=False, help="Task store directory."),
    max_tasks: int = typer.Option(5, min=1, help="Tasks measured, in id order."),
    per_unit: int = typer.Option(5, min=1, help="Mutants of each deleted unit."),
    seed: int = typer.Option(0, help="Seed of the mutants drawn."),
    as_json: bool = AS_JSON,
) -> None:
    """What one-token mutants of each task's own solution earn: a strong grader pays none of them 1.0."""
    from regrow.bench.mutant_rewards import run_mutant_bench

    report(run_mutant_bench(tasks, max_tasks, per_unit, seed), as_json)


def bench_server(
    tasks: Path = typer.Option(..., "--tasks", exists=True, file_okay=False, help="Task store directory."),
    repetitions: int = typer.Option(50, min=5, help="Steps measured per transport."),
    episodes: int = typer.Option(16, min=1, help="Concurrent episodes in the load test."),
    steps: int = typer.Option(20, min=1, help="Steps per episode in the load test (then submit)."),
    store_size: int = typer.Option(
        50,
        "--store-size",
        min=1,
        help="Tasks in the store the resets draw from; a smaller "
        "store is widened with copies of its tasks under new ids.",
    ),
    as_json: bool = AS_JSON,
) -> None:
    """Step overhead of /ws and gRPC over a direct exec, warm reset against cold create, and a load test."""
    from regrow.bench.serving import run_server_bench

    report(run_server_bench(tasks, repetitions, episodes, steps, store_size), as_json)


def bench_rollouts(options: RolloutBenchOptions, as_json: bool | None) -> None:
    """Episodes per minute against a live env server; with groups, the share whose rewards are all equal per sampler."""
    from regrow.bench.rollouts import run_rollout_bench
    from trainer_client.env.errors import EnvError

    unknown = sorted(set(options.sampler) - {"uniform", "frontier"})
    if unknown:
        fail(f"unknown sampler {', '.join(unknown)}: use uniform or frontier")
    try:
        runs = [run_rollout_bench(options, name) for name in options.sampler]
    except EnvError as error:
        fail(str(error))
    report(runs[0] if len(runs) == 1 else {"runs": runs}, as_json)


def bench_train(options: TrainBenchOptions, as_json: bool | None) -> None:
    """Step time of plain GRPO vs all three channels on the same batches; target ratio <= 1.35."""
    from regrow.bench.training import run_train_bench, split_problem
    from regrow.bench.training_ranks import run_ranked_train_bench

    if problem := split_problem(options.rows, options.pairs, options.processes):
        fail(problem)
    if options.sharding != "none" and options.processes < 2:
        fail(f"--sharding {options.sharding} shards the weights over processes: give --processes 2 or more")
    try:
        result = run_ranked_train_bench(options) if options.processes > 1 else run_train_bench(options)
    except RuntimeError as error:
        fail(str(error))
    report(result, as_json)


def bench_memory(options: MemoryBenchOptions, as_json: bool | None) -> None:
    """The memory plan (`regrow train --plan`) beside the peak memory real CPU training steps reach; contract: 15%."""
    from regrow.bench.memory import run_memory_bench

    try:
        result = run_memory_bench(options)
    except (ValueError, RuntimeError, FileNotFoundError) as error:
        fail(str(error))
    report(result, as_json)


def bench_sampling(
    model: str = typer.Option("smollm2", "--model", help="'smollm2', 'tiny' (random 2-layer Qwen2), or a folder."),
    busy: list[int] = typer.Option(
        None, "--busy", min=0, help="Spinning processes beside the sampler, as test runs are; repeat [default: 0, 2]."
    ),
    wait_policy: list[str] = typer.Option(
        None, "--wait-policy", help="OMP_WAIT_POLICY to measure under; repeat [default: PASSIVE, ACTIVE]."
    ),
    batch: int = typer.Option(4, min=1, help="Turns generated together (rollout workers)."),
    context: int = typer.Option(300, min=1, help="Tokens of context each turn starts from."),
    new_tokens: int = typer.Option(64, min=1, help="Tokens each turn writes."),
    threads: int = typer.Option(os.cpu_count() or 1, min=1, help="torch's threads [default: the CPUs]."),
    as_json: bool = AS_JSON,
) -> None:
    """Tokens a second of the CPU turn sampler, alone and beside busy processes, per OpenMP wait policy."""
    from regrow.bench.sampling import run_sampling_bench

    policies = [policy.upper() for policy in wait_policy or ["PASSIVE", "ACTIVE"]]
    unknown = sorted(set(policies) - {"PASSIVE", "ACTIVE"})
    if unknown:
        fail(f"--wait-policy {', '.join(unknown)}: OpenMP knows PASSIVE and ACTIVE")
    try:
        result = run_sampling_bench(model, busy or [0, 2], policies, batch, context, new_tokens, threads)
    except RuntimeError as error:
        fail(str(error))
    report(result, as_json)


def bench_sandbox(
    repetitions: int = typer.Option(30, min=5, help="Repetitions of each measurement."),
    as_json: bool = AS_JSON,
) -> None:
    """Container start, warm-pool acquire and exec overhead, p50/p95 in ms."""
    from regrow.bench.containers import run_sandbox_bench
    from sandbox import DockerBackend, SandboxError

    try:
        report(run_sandbox_bench(DockerBackend(), repetitions), as_json)
    except SandboxError as error:
        fail(str(error))


def bench_load(options: LoadBenchOptions, as_json: bool | None) -> None:
    """Clients play whole episodes over /ws back to back: throughput, latency per tool, errors, server memory."""
    from rich.progress import Progress

    from regrow.bench.load import LoadPlan, run_load_bench
    from regrow.bench.load_stats import gate_failures

    duration = options.duration
    try:
        plan = LoadPlan(
            options.tasks,
            options.episodes,
            options.steps,
            duration,
            url=options.url,
            slots=options.slots,
            warmup_s=options.warmup,
            split=options.split,
        )
    except ValueError as error:
        fail(str(error))
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("load", total=duration)
        try:
            result = run_load_bench(
                plan,
                on_progress=lambda elapsed, done: progress.update(
                    bar, completed=min(elapsed, duration), description=f"load: {done} episodes"
                ),
            )
        except (RuntimeError, ValueError, FileNotFoundError) as error:
            fail(str(error))
    report(result, as_json)
    failures = gate_failures(result, options.max_errors, options.max_rss_growth)
    if failures:
        fail("; ".join(failures))


def bench_dashboard(
    episodes: int = typer.Option(20_000, min=1, help="Episodes in the synthetic trace database."),
    tasks: int = typer.Option(200, min=1, help="Tasks they are spread over."),
    steps: int = typer.Option(8, min=0, help="Steps per episode."),
    repetitions: int = typer.Option(20, min=3, help="Measurements of each part."),
    as_json: bool = AS_JSON,
) -> None:
    """What one dashboard refresh costs: its SQL summaries on a large trace database, and its rolling windows full."""
    from regrow.bench.dashboard import run_dashboard_bench

    report(run_dashboard_bench(episodes, tasks, steps, repetitions), as_json)


def register(bench_app: typer.Typer) -> None:
    commands: dict[str, Callable[..., None]] = {
        "sandbox": bench_sandbox,
        "proxy": bench_proxy,
        "synth": bench_command(SynthBenchOptions, bench_synth),
        "pytest-fork": bench_pytest_fork,
        "corpus": bench_corpus,
        "server": bench_server,
        "load": bench_command(LoadBenchOptions, bench_load),
        "grade": bench_grade,
        "mutants": bench_mutants,
        "train": bench_command(TrainBenchOptions, bench_train),
        "memory": bench_command(MemoryBenchOptions, bench_memory),
        "sampling": bench_sampling,
        "gpu": bench_gpu,
        "rollouts": bench_command(RolloutBenchOptions, bench_rollouts),
        "dashboard": bench_dashboard,
    }
    for name, command in commands.items():
        bench_app.command(name)(command)
