"""The real-project corpus and `regrow bench corpus`: pinned sdists, one row per repository, errors kept per repo."""

import io
import os
import tarfile
import zipfile
from collections import Counter
from typing import ClassVar

import pytest
from typer.testing import CliRunner

from regrow.bench.corpus import (
    CORPUS,
    QUICK,
    CorpusRepo,
    corpus_totals,
    download_sdist,
    extract_sdist,
    repo_row,
    run_corpus_bench,
    select,
)
from task_synth.errors import SynthError
from task_synth.settings import SynthSettings


class FakeReport:
    candidates, baseline_tests, stable_tests, valid, tasks_per_hour = 5, 120, 118, 2, 41.04
    offered, stopped_by = 9, "candidates"
    rejections: ClassVar[Counter] = Counter({"no_f2p": 2, "leak": 1, "flaky": 0})
    records: ClassVar[list] = []


def test_the_corpus_pins_twelve_projects_across_backends_and_layouts():
    assert len(CORPUS) >= 12
    assert all(repo.requirement.count("==") == 1 and repo.why for repo in CORPUS)
    assert len({repo.name.lower() for repo in CORPUS}) == len(CORPUS)
    backends = {repo.backend for repo in CORPUS}
    assert {"setuptools", "setuptools-scm", "hatchling+hatch-vcs", "flit", "pdm-backend", "poetry-core"} <= backends
    assert {"src", "flat", "single-module", "namespace"} <= {repo.layout for repo in CORPUS}
    assert set(QUICK) <= {repo.name for repo in CORPUS}


def test_only_selects_by_name_and_an_unknown_name_lists_the_known_ones():
    assert [repo.name for repo in select(["SIX", "toolz"])] == ["six", "toolz"]
    assert select(None) == list(CORPUS)
    with pytest.raises(SynthError, match=r"not in the corpus: nope: pick from .*more-itertools"):
        select(["nope"])


def test_a_row_reports_yield_and_only_the_rejections_that_happened():
    row = repo_row(CORPUS[0], FakeReport(), None, 93.44)
    assert (row["baseline_tests"], row["stable_tests"], row["candidates"], row["valid"]) == (120, 118, 5, 2)
    assert row["yield"] == 0.4 and row["tasks_per_hour"] == 41.0 and row["wall_s"] == 93.4
    assert row["rejections"] == {"leak": 1, "no_f2p": 2}
    assert row["error"] is None
    assert (row["offered"], row["stopped_by"]) == (9, "candidates")


def test_a_failed_repo_is_a_row_with_its_error_and_counts_in_the_totals():
    failed = repo_row(CORPUS[1], None, "the test suite does not run at baseline (exit 4: ...): fix the suite", 12.0)
    assert (failed["candidates"], failed["valid"], failed["yield"], failed["rejections"]) == (0, 0, 0.0, {})
    assert failed["stopped_by"] == "error"
    totals = corpus_totals([repo_row(CORPUS[0], FakeReport(), None, 60.0), failed])
    assert totals == {
        "tasks_per_repo": {"min": 0, "median": 1.0, "max": 2},
        "repos_stopped_by_cap": 0,
        "repos": 2,
        "repos_with_tasks": 1,
        "valid": 2,
        "candidates": 5,
        "wall_s": 72.0,
        "tasks_per_hour": 100.0,
    }


def test_a_cached_sdist_is_used_without_pip(tmp_path):
    (tmp_path / "sdists").mkdir()
    cached = tmp_path / "sdists" / "jaraco_functools-4.1.0.tar.gz"
    cached.write_bytes(b"")
    assert download_sdist("jaraco.functools==4.1.0", tmp_path) == cached


def test_sdists_unpack_from_tar_and_zip_into_their_top_directory(tmp_path):
    payload = b"[project]\nname = 'tiny'\n"
    with tarfile.open(tmp_path / "tiny-1.0.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo("tiny-1.0/pyproject.toml")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    with zipfile.ZipFile(tmp_path / "tiny-2.0.zip", "w") as archive:
        archive.writestr("tiny-2.0/pyproject.toml", payload)
    assert (extract_sdist(tmp_path / "tiny-1.0.tar.gz", tmp_path / "a") / "pyproject.toml").read_bytes() == payload
    assert (extract_sdist(tmp_path / "tiny-2.0.zip", tmp_path / "b") / "pyproject.toml").read_bytes() == payload


def test_cli_refuses_an_unknown_repo_in_one_line():
    from regrow.cli import app

    result = CliRunner().invoke(app, ["bench", "corpus", "--only", "nope"])
    assert result.exit_code == 1
    assert "not in the corpus: nope" in result.output


@pytest.mark.network
@pytest.mark.docker
@pytest.mark.skipif(os.environ.get("REGROW_TEST_NETWORK") != "1", reason="fetches from PyPI; set REGROW_TEST_NETWORK=1")
def test_quick_corpus_repos_yield_tasks(tmp_path, docker_backend, base_image):
    settings = SynthSettings(max_tasks=1, max_candidates=6, jobs=1, cache_dir=tmp_path / "cache")
    result = run_corpus_bench(settings, select(list(QUICK)), backend=docker_backend)
    rows = {row["name"]: row for row in result["repos"]}
    for name in QUICK:
        assert rows[name]["error"] is None, rows[name]["error"]
        assert rows[name]["valid"] >= 1, rows[name]
    assert result["totals"]["repos_with_tasks"] == len(QUICK)


def test_corpus_repo_name_is_the_pypi_name():
    assert CorpusRepo("jaraco.functools==4.1.0", "setuptools-scm", "namespace", "").name == "jaraco.functools"


def test_a_run_says_what_stopped_it():
    from task_synth.pipeline import SynthReport

    capped = SynthReport(max_tasks=2, offered=40, budgeted=16, resumed=1)
    capped.records.append(object())  # type: ignore[arg-type]
    assert capped.stopped_by == "max_tasks"
    assert SynthReport(max_tasks=100, offered=40, budgeted=16).stopped_by == "candidate budget"
    assert SynthReport(max_tasks=100, offered=40, budgeted=40).stopped_by == "candidates"
