"""What `regrow serve` does with its settings (regrow/ parses them), and `regrow traces export`."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.console import Console

from env_server.settings import ServerSettings
from proto.dataset_files import DatasetFormat

console = Console(stderr=True)
traces_app = typer.Typer(help="Recorded episodes.", no_args_is_help=True)


def _use_json_logs() -> None:
    from env_server.observability.event_log import JsonLineFormatter

    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonLineFormatter())


def serve(settings: ServerSettings) -> None:
    """Serve until SIGINT or SIGTERM, logging JSON lines; a bad store or an unreachable engine is one error line."""
    from env_server.lifecycle.server import serve as run_server
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


def register(app: typer.Typer) -> None:
    app.add_typer(traces_app, name="traces")
