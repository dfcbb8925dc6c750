"""`regrow synth` and `regrow bench synth`: rich progress and a summary on stderr; the bench prints JSON."""

from __future__ import annotations

from pathlib import Path

import typer

MODES_HELP = "Deletion mode: stub, remove or file; repeat for several (tasks alternate between them)."


def _settings(**overrides):
    from task_synth.settings import SynthSettings

    return SynthSettings(**{key: value for key, value in overrides.items() if value is not None})


def _progress_bars(console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console)
    bars: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in bars:
            for bar in bars.values():  # a new stage means the earlier ones are done
                progress.update(bar, completed=progress.tasks[bar].total)
            bars[stage] = progress.add_task(stage, total=total)
        progress.update(bars[stage], completed=done, total=total)

    return progress, update


def synth(
    source: str = typer.Argument(..., help="Local path or git URL of the repository."),
    out: Path = typer.Option(..., "--out", help="Task store directory (tasks.jsonl, hidden/, tasks.parquet)."),
    ref: str = typer.Option(None, help="Git ref to check out."),
    mode: list[str] = typer.Option(["stub"], "--mode", help=MODES_HELP),
    seed: int = typer.Option(0, help="Seed for candidate sampling; the same seed gives the same tasks."),
    max_tasks: int = typer.Option(10, "--max-tasks", min=1),
    max_candidates: int = typer.Option(None, "--max-candidates", min=1, help="Candidates to try at most."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Candidates validated in parallel."),
    test_cmd: str = typer.Option(None, "--test-cmd", help="Base pytest command run in /workspace."),
    rewrite_url: str = typer.Option(None, "--rewrite-url", help="OpenAI-compatible endpoint (…/v1) that rewrites problem statements."),
    rewrite_model: str = typer.Option(None, "--rewrite-model", help="Model for --rewrite-url; the key is read from $OPENAI_API_KEY."),
) -> None:
    """Turn a test-heavy Python repository into validated feature-deletion tasks."""
    from rich.table import Table

    from regrow.cli import console, fail
    from sandbox import SandboxError
    from task_synth.errors import SynthError
    from task_synth.pipeline import synthesize

    try:
        settings = _settings(ref=ref, modes=mode, seed=seed, max_tasks=max_tasks, max_candidates=max_candidates, jobs=jobs, test_command=test_cmd,
                             rewrite_base_url=rewrite_url, rewrite_model=rewrite_model)
    except ValueError as error:
        fail(f"invalid option: {str(error).splitlines()[-1]} (modes are stub, remove, file)")
    progress, update = _progress_bars(console)
    try:
        with progress:
            report = synthesize(source, out, settings, on_progress=update)
    except (SynthError, SandboxError) as error:
        fail(str(error))
    table = Table(title=f"regrow synth {report.repo}@{report.commit[:12]}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [("candidates", report.candidates), ("valid tasks", report.valid)]
    rows += [(f"rejected: {reason.replace('_', ' ')}", count) for reason, count in report.rejections.items()]
    rows += [
        ("baseline tests (stable)", f"{report.baseline_tests} ({report.stable_tests})"),
        ("test executions", report.test_executions),
        ("test executions per task", f"{report.test_executions_per_task:.1f}"),
        ("tasks per hour", f"{report.tasks_per_hour:.1f}"),
        ("wall time", f"{report.wall_s:.0f} s"),
        ("task store", str(out)),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)


def bench_synth(
    source: str = typer.Argument(..., help="Local path or git URL of the repository."),
    candidates: int = typer.Option(20, min=1, help="Candidates validated each way."),
    mode: list[str] = typer.Option(["stub", "remove", "file"], "--mode", help=MODES_HELP),
    seed: int = typer.Option(0),
    ref: str = typer.Option(None),
    test_cmd: str = typer.Option(None, "--test-cmd"),
    json_output: bool = typer.Option(True, "--json/--no-json", help="Print JSON (the only format)."),
) -> None:
    """Coverage-guided vs naive validation of the same candidates: test executions, time, F2P agreement."""
    from regrow.cli import console, fail, print_json
    from sandbox import SandboxError
    from task_synth.bench import run_synth_bench
    from task_synth.errors import SynthError

    settings = _settings(ref=ref, modes=mode, seed=seed, test_command=test_cmd)
    progress, update = _progress_bars(console)
    try:
        with progress:
            result = run_synth_bench(source, settings, candidates, on_progress=update)
    except (SynthError, SandboxError) as error:
        fail(str(error))
    print_json(result)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("synth")(synth)
    bench_app.command("synth")(bench_synth)
