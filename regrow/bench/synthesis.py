"""`regrow bench synth`: valid tasks per hour with the time per stage, and coverage-guided against naive (whole suite
per candidate) validation of the same candidates."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from proto.tasks import TaskRecord
from sandbox import DockerBackend
from task_synth.candidates.deletion import DeletionError, delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.pipeline import ordered_candidates, synthesize
from task_synth.settings import SynthSettings
from task_synth.validation.repo_context import prepare_repo
from task_synth.validation.verdict import validate


def run_throughput_bench(
    source: str, settings: SynthSettings, backend: DockerBackend | None = None, on_progress=None
) -> dict:
    """One whole `regrow synth` run into a scratch store: valid tasks per hour, and where the time went.

    Preparing the repository (wheelhouse, image, baseline) is paid once per repository, so the candidates' rate is
    reported apart from the rate of the whole run.
    """
    with tempfile.TemporaryDirectory(prefix="regrow-bench-store-") as scratch:
        report = synthesize(source, Path(scratch) / "store", settings, backend, on_progress)
    # The stages a repository pays once, one after another (the image scan beside the baseline is not added twice).
    prepare = {"checkout", "wheelhouse", "repo image", "editable install", "baseline", "image scan"}
    prepare_s = sum(values["s"] for name, values in report.stages.items() if name in prepare)
    candidates_s = report.wall_s - prepare_s
    return {
        "source": source,
        "repo": report.repo,
        "commit": report.commit,
        "modes": list(settings.modes),
        "jobs": settings.jobs,
        "seed": settings.seed,
        "valid": report.valid,
        "candidates": report.candidates,
        "offered": report.offered,
        "stopped_by": report.stopped_by,
        "rejections": {reason: count for reason, count in report.rejections.items() if count},
        "wall_s": round(report.wall_s, 1),
        "prepare_s": round(prepare_s, 1),
        "candidates_s": round(candidates_s, 1),
        "tasks_per_hour": round(report.tasks_per_hour, 1),
        "tasks_per_hour_after_prepare": round(3600 * report.valid / candidates_s, 1) if candidates_s > 0 else 0.0,
        "test_executions_per_task": round(report.test_executions_per_task, 1),
        "task_strength": task_strength(report.records),
        "stages": report.stages,
    }


def task_strength(records: list[TaskRecord]) -> dict:
    """How strong the kept tasks' checks are: the mutant kill rate (min, median) and what the mutation stage cost."""
    rates = [r.stats.mutant_kill_rate for r in records if r.stats.mutant_kill_rate is not None]
    measured = [r for r in records if r.stats.mutants]
    return {
        "tasks_with_checks": sum(r.stats.hidden_checks > 0 for r in records),
        "tasks_without_checks": sum(r.stats.hidden_checks == 0 for r in records),
        "tasks_mutated": len(measured),
        "kill_rate_min": round(min(rates), 3) if rates else None,
        "kill_rate_median": round(statistics.median(rates), 3) if rates else None,
        "mutants_per_task": round(statistics.mean(r.stats.mutants for r in measured), 1) if measured else 0,
        "mutation_s_per_task": round(statistics.mean(r.stats.mutation_s for r in measured), 2) if measured else 0.0,
    }


def run_synth_bench(
    source: str, settings: SynthSettings, candidates: int, backend: DockerBackend | None = None, on_progress=None
) -> dict:
    """Validate the same candidates both ways in one sandbox and compare test executions, time and F2P sets.

    Flaky reruns are off in both ways, so the numbers compare only how F2P is found.
    """
    backend = backend or DockerBackend()
    progress = on_progress or (lambda stage, done, total: None)
    settings = settings.model_copy(update={"flaky_reruns": 0})
    created: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="regrow-bench-") as scratch:
            started = time.monotonic()
            context = prepare_repo(source, settings, backend, Path(scratch), created, lambda name: progress(name, 0, 1))
            prepare_s = time.monotonic() - started
            pairs = ordered_candidates(
                context, enumerate_units(context.layout), list(settings.modes), settings.seed, 10 * candidates
            )
            deletions = []
            for unit, mode in pairs:
                try:
                    deletions.append(delete_unit(context.layout, unit, mode))
                except DeletionError:
                    continue
                if len(deletions) == candidates:
                    break
            ways: dict[str, list] = {"guided": [], "naive": []}
            timings = {"guided": 0.0, "naive": 0.0}
            with context.sandbox() as sb:
                # The ways alternate per candidate, so that warm caches favour neither.
                for index, deletion in enumerate(deletions):
                    module = context.layout.modules[deletion.unit.path]
                    for way in ways:
                        started = time.monotonic()
                        ways[way].append(
                            validate(sb, context.baseline, deletion, module, settings, naive=way == "naive")
                        )
                        timings[way] += time.monotonic() - started
                    progress("candidates", index + 1, len(deletions))
    except BaseException:
        for image in created:
            backend.remove_image(image)
        raise
    guided, naive = ways["guided"], ways["naive"]
    mismatches = [
        f"{d.mode}:{d.unit.key}"
        for d, g, n in zip(deletions, guided, naive, strict=True)
        if set(g.fail_to_pass) != set(n.fail_to_pass)
    ]
    guided_execs = sum(v.test_executions for v in guided)
    naive_execs = sum(v.test_executions for v in naive)
    valid = sum(1 for v in guided if v.rejection is None)
    return {
        "source": source,
        "repo": context.checkout.repo_name,
        "commit": context.checkout.commit,
        "modes": list(settings.modes),
        "seed": settings.seed,
        "candidates": len(deletions),
        "suite_tests": len(context.baseline.collected),
        "stable_tests": len(context.baseline.stable),
        "prepare_s": round(prepare_s, 2),
        "guided": {"test_executions": guided_execs, "wall_s": round(timings["guided"], 2)},
        "naive": {"test_executions": naive_execs, "wall_s": round(timings["naive"], 2)},
        "speedup_test_execs": round(naive_execs / guided_execs, 2) if guided_execs else None,
        "speedup_wall": round(timings["naive"] / timings["guided"], 2) if timings["guided"] else None,
        "f2p_identical": not mismatches,
        "f2p_mismatches": mismatches,
        "valid": valid,
        "yield": round(valid / len(deletions), 3) if deletions else 0.0,
        "rejections": {
            reason: sum(1 for v in guided if v.rejection == reason)
            for reason in sorted({v.rejection for v in guided} - {None})
        },
    }


def run_fork_bench(source: str, settings: SynthSettings, runs: int, backend: DockerBackend | None = None) -> dict:
    """Seconds per test run in one validation sandbox, through its pytest fork server and as a fresh `python -m
    pytest`, alternating so that both meet the same load: each run is one test file of the suite, as a candidate's
    checks run a few files."""
    from task_synth.validation.fork_server import has_fork_server, use_fork_server
    from task_synth.validation.suite_runs import files_of_tests, run_tests

    backend = backend or DockerBackend()
    settings = settings.model_copy(update={"fork_server": True})
    with tempfile.TemporaryDirectory(prefix="regrow-bench-fork-") as scratch:
        created: list[str] = []
        context = prepare_repo(source, settings, backend, Path(scratch), created)
        tests = sorted(context.baseline.stable)
        chosen = [test for test in tests if test.startswith(files_of_tests(tests)[0] + "::")]
        times: dict[str, list[float]] = {"fork server": [], "fresh pytest": []}
        with context.sandbox() as sb:
            served = has_fork_server(sb)
            for _ in range(runs):
                for way in times:
                    use_fork_server(sb, served and way == "fork server")
                    started = time.perf_counter()
                    run = run_tests(sb, settings.test_command, chosen, settings.test_timeout_s)
                    times[way].append(time.perf_counter() - started)
                    if run.failed(chosen):
                        raise RuntimeError(f"{way}: {sorted(run.failed(chosen))[:3]} failed at baseline")
    p50 = {way: statistics.median(values) for way, values in times.items()}
    return {
        "repo": context.checkout.repo_name,
        "runs": runs,
        "tests_per_run": len(chosen),
        "server_started": served,
        "p50_s": {way: round(value, 3) for way, value in p50.items()},
        "saved_per_run_s": round(p50["fresh pytest"] - p50["fork server"], 3),
    }
