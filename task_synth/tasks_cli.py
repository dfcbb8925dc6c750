"""`regrow tasks`: commands on task stores (`regrow tasks merge`; `regrow tasks export` is the command line's, in
regrow/tasks_export.py, since one of its formats is env_server's), and the difficulty table that `regrow synth`
prints too."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from proto.tasks import TaskRecord

console = Console(stderr=True)
tasks_app = typer.Typer(help="Task stores.", no_args_is_help=True)


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
