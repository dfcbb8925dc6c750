"""What `regrow serve` does with its settings (regrow/ parses them), and `regrow traces export` and `regrade`."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from env_server.settings import ServerSettings
from proto.dataset_files import DatasetFormat

if TYPE_CHECKING:
    from env_server.task_store import Task
    from env_server.traces.regrade import RegradeReport
    from sandbox import DockerBackend, Sandbox

console = Console(stderr=True)
traces_app = typer.Typer(help="Recorded episodes.", no_args_is_help=True)


def _use_json_logs() -> None:
    from env_server.observability.event_log import JsonLineFormatter

    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonLineFormatter())


def serve(settings: ServerSettings) -> None:
    """Serve until SIGINT or SIGTERM, logging JSON lines; a bad store or an unreachable engine is one error line."""
    from env_server.server import serve as run_server
    from sandbox import SandboxError

    _use_json_logs()
    try:
        run_server(settings)
    except (SandboxError, FileNotFoundError, ValueError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None


@traces_app.command("export")
def traces_export(
    db: Path = typer.Option(..., "--db", help="The server's SQLite trace file."),
    out: Path = typer.Option(..., "--out", help="Output file (a folder for hf)."),
    format: DatasetFormat = typer.Option(
        DatasetFormat.jsonl,
        "--format",
        help="jsonl (EpisodeTrace rows, what `regrow replay` reads), parquet, or hf (datasets.save_to_disk).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
    tokens: list[Path] = typer.Option(
        [],
        "--tokens",
        help="episode_tokens.jsonl written by `regrow train` in its output dir: fills the token columns "
        "(prompt_ids, completion_ids, logprobs, env_mask). Repeat for several runs.",
    ),
) -> None:
    """Export every recorded episode as a dataset: chat messages, tool trace, reward and details, and the policy's
    tokens where a trainer recorded them."""
    from env_server.traces.export import TraceExportError, export_traces

    try:
        with console.status(f"exporting the episodes in {db}..."):
            count = export_traces(db, out, format, force, tokens)
    except (TraceExportError, FileExistsError, ImportError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    console.print(
        f"exported {count.episodes} episodes to {out} ({format.value}; {count.with_tokens} with the trainer's tokens; "
        f"{count.unmatched_tokens} token records matched no episode)"
    )


@traces_app.command("regrade")
def traces_regrade(
    tasks: Path = typer.Option(..., "--tasks", help="The task store the episodes were served from."),
    traces: Path | None = typer.Option(
        None,
        "--traces",
        "--db",
        help="The server's SQLite trace file, or the folder holding its traces.sqlite; default TASKS/traces.sqlite.",
    ),
    episode: list[str] = typer.Option([], "--episode", help="An episode id to re-grade; repeat. Default: all graded."),
    max_episodes: int | None = typer.Option(None, "--max-episodes", min=1, help="Re-grade at most N, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: every episode and the totals."),
) -> None:
    """Grade stored episodes' submissions again with this grader and report the rewards that change: a lowered one
    was paid for by a weaker grader (a forgery, or a check that grew stricter)."""
    from env_server.task_store import TaskStore
    from env_server.traces.export import TraceExportError, open_traces
    from env_server.traces.regrade import Grading, regrade, selected_episodes
    from sandbox import DockerBackend, SandboxError

    settings = ServerSettings(tasks_dir=tasks)
    db = traces / "traces.sqlite" if traces is not None and traces.is_dir() else traces or settings.trace_path()
    if not db.is_file():
        console.print(f"[bold red]error:[/] no trace database at {db}: pass --traces, the server's trace file or dir")
        raise typer.Exit(1)
    try:
        store_of_tasks = TaskStore(tasks)
        grading = Grading(_seeded_sandboxes(DockerBackend()), settings.grade_limits())
        with open_traces(db) as store, Progress(console=console, transient=True) as progress:
            chosen = selected_episodes(store, episode, max_episodes)
            bar = progress.add_task("re-grading", total=len(chosen))
            report = regrade(store, store_of_tasks, grading, chosen, on_result=lambda _: progress.advance(bar))
    except (TraceExportError, FileNotFoundError, ValueError, SandboxError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    _print_regrade(report, as_json)


def _seeded_sandboxes(backend: DockerBackend) -> Callable[[Task], Sandbox]:
    """A fresh container of a task's image with the task's workspace in, as a grading gets one."""
    from env_server.lifecycle.provisioning import seed
    from sandbox.settings import SandboxSettings

    limits = SandboxSettings().limits()

    def fresh(task: Task) -> Sandbox:
        sandbox = backend.create(task.record.image, limits=limits)
        try:
            return seed(task, sandbox)
        except BaseException:
            sandbox.destroy()
            raise

    return fresh


def _print_regrade(report: RegradeReport, as_json: bool) -> None:
    """One JSON object on stdout, or a table of the changed and failed episodes and a line of totals."""
    totals = report.totals()
    if as_json:
        document = {
            "episodes": [{**asdict(result), "changed": result.changed} for result in report.episodes],
            "skipped": [asdict(skipped) for skipped in report.skipped],
            "totals": asdict(totals),
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    table = Table(title="episodes whose reward changed, or that could not be graded again")
    for column in ("episode", "task", "reward", "basis", "from", "note"):
        table.add_column(column, overflow="fold")
    for result in report.episodes:
        if result.changed or result.new_reward is None:
            reward = f"{result.old_reward} -> {result.new_reward}"
            basis = f"{result.old_basis} -> {result.new_basis}"
            table.add_row(result.episode_id, result.task_id, reward, basis, result.source, result.error or "")
    out = Console()
    if table.row_count:
        out.print(table)
    for skipped in report.skipped:
        out.print(f"skipped {skipped.episode_id}: {skipped.reason}")
    out.print(
        f"re-graded {totals.regraded}: rewards changed {totals.changed} ({totals.lowered} lowered, "
        f"{totals.raised} raised); failed {totals.failed}; skipped {totals.skipped}"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(traces_app, name="traces")
