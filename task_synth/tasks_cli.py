"""`regrow tasks`: commands on task stores (`regrow tasks export`, `regrow tasks merge`), and the difficulty table
that `regrow synth` prints too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console

from proto.dataset_files import DatasetFormat
from proto.tasks import TaskRecord

console = Console(stderr=True)
tasks_app = typer.Typer(help="Task stores.", no_args_is_help=True)
# Formats of task folders that other parts write, by name: export(store, out, force) -> tasks written. regrow's
# command line adds env_server's `harbor` here, since task_synth does not import env_server.
TASK_FOLDER_FORMATS: dict[str, Callable[[Path, Path, bool], int]] = {}


@tasks_app.command("export")
def tasks_export(
    store: Path = typer.Option(..., "--store", help="Task store directory (tasks.jsonl)."),
    out: Path = typer.Option(..., "--out", help="Output file (a folder for hf and harbor)."),
    format: str = typer.Option(
        DatasetFormat.hf.value,
        "--format",
        help="hf (datasets.save_to_disk), parquet or jsonl: a dataset with SWE-bench's field names; harbor: one Harbor "
        "task directory per task.",
    ),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Export every task as a dataset with SWE-bench's field names (instance_id, patch, FAIL_TO_PASS, ...), or as
    Harbor task directories."""
    from task_synth.store.task_export import TaskExportError, export_tasks

    formats = [f.value for f in DatasetFormat] + list(TASK_FOLDER_FORMATS)
    if format not in formats:
        console.print(f"[bold red]error:[/] --format {format!r}: choose one of {', '.join(formats)}")
        raise typer.Exit(1)
    try:
        if format in TASK_FOLDER_FORMATS:
            count = TASK_FOLDER_FORMATS[format](store, out, force)
        else:
            count = export_tasks(store, out, DatasetFormat(format), force)
    except (TaskExportError, ValueError, FileExistsError, FileNotFoundError, ImportError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    console.print(f"exported {count} tasks to {out} ({format})")
    from proto.task_files import read_records

    print_difficulty(console, read_records(store))


@tasks_app.command("merge")
def tasks_merge(
    shards: list[Path] = typer.Argument(..., help="Task stores to join (one per node or per job)."),
    out: Path = typer.Option(..., "--out", help="The store they join into (made when missing; its tasks stay)."),
) -> None:
    """Join task stores into one: every task once, its files before its record; rerun to finish a stopped merge."""
    from task_synth.errors import SynthError
    from task_synth.store.store_merge import merge_stores

    try:
        report = merge_stores(shards, out)
    except SynthError as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    for shard in shards:
        added, there = report.added[str(shard)], report.already_there[str(shard)]
        console.print(f"{shard}: {added} task(s) added, {there} already there")
    console.print(f"{out}: {report.total} tasks")


def print_difficulty(console: Console, records: list[TaskRecord]) -> None:
    """Print the spread (min, median, max) of the tasks' difficulty signals; nothing when no task has one."""
    from rich.table import Table

    from task_synth.store.difficulty import spread

    signals = spread(records)
    if not signals:
        return
    table = Table(title=f"difficulty of {len(records)} tasks")
    for column in ("signal", "min", "median", "max"):
        table.add_column(column, justify="left" if column == "signal" else "right")
    for name, values in signals.items():
        table.add_row(name, *(f"{values[key]:g}" for key in ("min", "median", "max")))
    console.print(table)
