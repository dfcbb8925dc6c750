"""`regrow tasks export`: a task store as a dataset with SWE-bench's field names (task_synth writes those) or as task
folders another part writes (env_server's Harbor task directories). The command line owns the table of formats,
since it alone sees every part."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from proto.dataset_files import DatasetFormat
from task_synth.tasks_cli import console, print_difficulty


def _harbor(store: Path, out: Path, force: bool) -> int:
    from env_server.harbor.export import export_harbor  # env_server loads slowly: only when asked for

    return export_harbor(store, out, force)


# Task folder formats by name, each the function that writes one: export(store, out, force) -> tasks written.
TASK_FOLDER_FORMATS: dict[str, Callable[[Path, Path, bool], int]] = {"harbor": _harbor}


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


def register(tasks_app: typer.Typer) -> None:
    tasks_app.command("export")(tasks_export)
