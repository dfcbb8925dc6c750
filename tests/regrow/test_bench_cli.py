"""`regrow bench`'s output: JSON for pipes and --json, a table of dotted keys with --table (no Docker)."""

import json

import typer
from typer.testing import CliRunner

from regrow.bench.report import AS_JSON, report

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


def _tiny_sdist(path):
    import io
    import tarfile

    payload = b"[project]\nname = 'tiny'\n"
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo("tiny-1.0/pyproject.toml")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    return path


def test_bench_synth_reads_an_sdist_a_pinned_requirement_from_the_cache_or_a_path(tmp_path):
    from regrow.bench.corpus import repo_source

    sdist = _tiny_sdist(tmp_path / "tiny-1.0.tar.gz")
    unpacked = repo_source(str(sdist), tmp_path / "cache", tmp_path / "a")
    assert (tmp_path / "a" / "tiny-1.0" / "pyproject.toml").is_file() and unpacked.endswith("tiny-1.0")
    (tmp_path / "cache" / "sdists").mkdir(parents=True)
    _tiny_sdist(tmp_path / "cache" / "sdists" / "tiny-1.0.tar.gz")
    assert repo_source("tiny==1.0", tmp_path / "cache", tmp_path / "b").endswith("tiny-1.0")  # no pip: cached
    assert repo_source("/some/checkout", tmp_path / "cache", tmp_path / "c") == "/some/checkout"


def test_bench_synth_takes_the_repository_once():
    from regrow.cli import app

    for arguments in (["bench", "synth"], ["bench", "synth", "/a", "--repo", "/b"]):
        result = CliRunner().invoke(app, arguments)
        assert result.exit_code == 1 and "not both and not neither" in " ".join(result.output.split())
