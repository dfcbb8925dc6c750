"""What `regrow synth` does with its settings (regrow/ parses them), and the progress `regrow bench synth` shares."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import typer
from pydantic import Field
from pydantic_settings import BaseSettings, CliPositionalArg, SettingsConfigDict
from rich.console import Console

from task_synth.settings import SynthSettings
from task_synth.tasks_cli import print_difficulty, tasks_app

console = Console(stderr=True)
MODES_HELP = "Deletion mode: stub, remove or file; repeat for several (tasks alternate between them)."


def fail(message: str) -> NoReturn:
    """Print a one-line error and exit 1."""
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(1)


def synth_settings(**overrides):
    return SynthSettings(**{key: value for key, value in overrides.items() if value is not None})


def stop_on_sigterm() -> None:
    """SIGTERM (`docker stop`, `kill`, a batch scheduler) ends a run as Ctrl-C does, so its sandboxes are removed on
    the way out; Python's default would end the process where it stands and leave them running."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def progress_bars(console):
    """One display: a bar for the repositories (batches only) and one for the current stage, re-described per stage."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )
    state = {"repo": "", "stage": None, "repos": None}

    def update(stage: str, done: int, total: int) -> None:
        label = f"{state['repo']}: {stage}" if state["repo"] else stage
        if state["stage"] is None:
            state["stage"] = progress.add_task(label, total=total)
        progress.update(state["stage"], description=label, completed=done, total=total)

    def on_repo(index: int, total: int, source: str) -> None:
        if state["repos"] is None:
            state["repos"] = progress.add_task("repositories", total=total)
        progress.update(state["repos"], completed=index, total=total)
        state["repo"] = source

    return progress, update, on_repo


def _print_summary(console, title: str, report_rows: list[tuple[str, object]]) -> None:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in report_rows:
        table.add_row(name, str(value))
    console.print(table)


def _lowest_kill_rate(records) -> str:
    rates = [r.stats.mutant_kill_rate for r in records if r.stats.mutant_kill_rate is not None]
    return f"{min(rates):.0%}" if rates else "none measured"


def _report_rows(report, out: Path) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [
        ("candidates (of those the repository offers)", f"{report.candidates} ({report.offered})"),
        ("valid tasks", report.valid),
        ("stopped by", report.stopped_by),
    ]
    if report.skipped:
        rows += [("judged by an earlier run (skipped)", report.skipped), ("tasks from an earlier run", report.resumed)]
    rows += [(f"rejected: {reason.replace('_', ' ')}", count) for reason, count in report.rejections.items()]
    rows += [
        ("baseline tests (stable)", f"{report.baseline_tests} ({report.stable_tests})"),
        ("test executions", report.test_executions),
        ("test executions per task", f"{report.test_executions_per_task:.1f}"),
        ("tasks per hour", f"{report.tasks_per_hour:.1f}"),
        ("tasks with out-of-process checks", sum(r.stats.hidden_checks > 0 for r in report.records)),
        ("mutant kill rate (min)", _lowest_kill_rate(report.records)),
        ("impossible twins", len(report.twins)),
        ("wall time", f"{report.wall_s:.0f} s"),
        ("task store", str(out)),
    ]
    return rows


class SynthTargets(BaseSettings):
    """What `regrow synth` reads and where it writes: one repository or a file of them, and the task store."""

    model_config = SettingsConfigDict(env_prefix="REGROW_SYNTH_")

    source: CliPositionalArg[str | None] = Field(
        default=None, description="Local path, sdist (.tar.gz or .zip) or git URL of the repository (or use --repos)."
    )
    out: Path = Field(description="Task store directory (tasks.jsonl, workspaces/, hidden/, repos/).")
    repos: Path | None = Field(
        default=None, description="A file with one repository per line (`source [ref]`); resumable."
    )
    log_file: Path | None = Field(
        default=None, description="Where the run's progress is logged as well (default: synth.log in the store)."
    )


def synth(targets: SynthTargets, settings: SynthSettings) -> None:
    """Synthesize with SETTINGS, showing progress, then print the summary and the tasks' difficulty."""
    from sandbox import SandboxError
    from task_synth.errors import SynthError
    from task_synth.pipeline import SynthStopped

    source, out, repos = targets.source, targets.out, targets.repos
    progress, shown, on_repo = progress_bars(console)
    stop_on_sigterm()
    log_file, new_store = targets.log_file or out / "synth.log", not out.exists()
    try:
        with _logged_progress(log_file, shown) as update:
            if repos is not None and source is None:
                _synth_many(console, repos, out, settings, progress, update, on_repo)
                return
            if source is None or repos is not None:
                fail("give one repository (SOURCE) or a file of them (--repos), not both and not neither")
            from task_synth.pipeline import synthesize

            with progress:
                report = synthesize(source, out, settings, on_progress=update)
    except SynthStopped as stopped:
        console.print(f"[bold yellow]{stopped}[/]")
        raise typer.Exit(130) from None
    except (SynthError, SandboxError) as error:
        if new_store and out.is_dir() and {path.name for path in out.iterdir()} <= {log_file.name}:
            shutil.rmtree(out)  # bad input leaves nothing: not even a store holding only the log of its failure
        fail(str(error))
    _print_summary(console, f"regrow synth {report.repo}@{report.commit[:12]}", _report_rows(report, out))
    print_difficulty(console, report.records)


class _FileMadeOnFirstRecord(logging.FileHandler):
    """A log file whose folder is made only when the first record comes: bad input leaves no store behind."""

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


_LOGGED = ("task_synth", "sandbox", "task_synth.progress")
Progress = Callable[[str, int, int], None]


@contextlib.contextmanager
def _logged_progress(path: Path, shown: Progress) -> Iterator[Progress]:
    """The progress shown in the terminal, and logged with every line of the run to `path` (appended) until the
    block ends."""
    handler = _FileMadeOnFirstRecord(path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(name) for name in _LOGGED]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    progress_log = loggers[-1]
    progress_log.propagate = False  # the terminal shows the bars instead
    last: dict[str, tuple[int, int]] = {}

    def update(stage: str, done: int, total: int) -> None:
        shown(stage, done, total)
        if last.get(stage) != (done, total):
            last[stage] = (done, total)
            progress_log.info("%s %d/%d", stage, done, total)

    try:
        yield update
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
        progress_log.propagate = True
        handler.close()


def _synth_many(console, repos: Path, out: Path, settings, progress, update, on_repo) -> None:
    from rich.table import Table

    from proto.task_files import read_records
    from task_synth.batch import read_sources, synthesize_many

    sources = read_sources(repos)
    with progress:
        state, _ = synthesize_many(sources, out, settings, on_repo=on_repo, on_progress=update)
    table = Table(title=f"regrow synth --repos {repos} ({len(sources)} repositories)")
    for column in ("repository", "status", "valid", "candidates", "wall s", "error"):
        table.add_column(column)
    for source, ref in sources:
        outcome = state.get(f"{source}@{ref}" if ref else source)
        if outcome is not None:
            table.add_row(
                outcome.source,
                outcome.status,
                str(outcome.valid),
                str(outcome.candidates),
                f"{outcome.wall_s:.0f}",
                outcome.error.splitlines()[0][:100] if outcome.error else "",
            )
    console.print(table)
    print_difficulty(console, read_records(out))


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")
