"""`regrow tasks`: commands on a task store (`regrow tasks export`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from proto.dataset_files import DatasetFormat

console = Console(stderr=True)
tasks_app = typer.Typer(help="Task stores.", no_args_is_help=True)


@tasks_app.command("export")
def tasks_export(
    store: Path = typer.Option(..., "--store", help="Task store directory (tasks.jsonl)."),
    out: Path = typer.Option(..., "--out", help="Output file (a folder for hf)."),
    format: DatasetFormat = typer.Option(
        DatasetFormat.hf, "--format", help="hf (datasets.save_to_disk), parquet or jsonl."
    ),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Export every task as a dataset with SWE-bench's field names (instance_id, patch, FAIL_TO_PASS, ...)."""
    from task_synth.store.task_export import TaskExportError, export_tasks

    try:
        count = export_tasks(store, out, format, force)
    except (TaskExportError, FileExistsError, ImportError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    console.print(f"exported {count} tasks to {out} ({format.value})")
