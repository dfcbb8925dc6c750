"""`regrow bench`'s output: JSON for pipes and --json, a table of dotted keys with --table (no Docker)."""

import json

import typer
from typer.testing import CliRunner

from regrow.bench_cli import AS_JSON, report

RESULT = {"tasks_per_hour": 41.5, "stages": {"baseline_s": 12.0}, "repos": [{"name": "toolz", "valid": 2}]}


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def bench(as_json: bool = AS_JSON) -> None:
        report(RESULT, as_json)

    return app


def test_json_is_the_default_off_a_terminal_and_with_json():
    for argv in ([], ["--json"]):
        result = CliRunner().invoke(_app(), argv)
        assert result.exit_code == 0 and json.loads(result.stdout) == RESULT


def test_table_shows_every_number_under_its_dotted_key():
    result = CliRunner().invoke(_app(), ["--table"])
    assert result.exit_code == 0
    for key, value in (("tasks_per_hour", "41.5"), ("stages.baseline_s", "12.0"), ("repos.0.name", "toolz")):
        line = next(line for line in result.stdout.splitlines() if key in line)
        assert value in line
    assert not result.stdout.lstrip().startswith("{")
