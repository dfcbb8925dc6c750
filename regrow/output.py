"""What the `regrow` command prints outside a command's own output: one stderr console and the one-line error."""

from typing import NoReturn

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(message: str) -> NoReturn:
    """Print a one-line error and exit 1."""
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(1)
