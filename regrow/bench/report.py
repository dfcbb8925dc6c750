"""How every `regrow bench` command prints its numbers: JSON for scripts and pipes, a table for a person."""

from __future__ import annotations

import json
import sys

import typer
from rich.console import Console
from rich.table import Table

AS_JSON = typer.Option(
    None,
    "--json/--table",
    help="Print JSON (the default when stdout is not a terminal) or a table.",
    show_default=False,
)


def report(result: dict, as_json: bool | None) -> None:
    """The benchmark's numbers: JSON for scripts and pipes, a table of dotted keys for a person at a terminal."""
    if as_json is None:
        as_json = not sys.stdout.isatty()
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
        return
    table = Table(show_header=False)
    for key, value in _flattened(result):
        table.add_row(key, value)
    Console().print(table)


def _flattened(value: object, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict) and value:
        return [row for key, inner in value.items() for row in _flattened(inner, f"{prefix}{key}.")]
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return [row for index, item in enumerate(value) for row in _flattened(item, f"{prefix}{index}.")]
    return [(prefix.rstrip("."), json.dumps(value, default=str) if not isinstance(value, str) else value)]
