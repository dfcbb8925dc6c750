"""`regrow bench corpus`: synthesis on a pinned corpus of 15 real pure-Python projects, each from its PyPI sdist."""

from __future__ import annotations

import json
import logging
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox import DockerBackend, SandboxError
from task_synth.errors import SynthError
from task_synth.repository.source import extract_sdist
from task_synth.settings import SynthSettings

if TYPE_CHECKING:  # the pipeline imports libcst, pyarrow and numpy: half a second that only a run needs
    from task_synth.pipeline import SynthReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorpusRepo:
    """One pinned sdist and why it is in the corpus: what it exercises that the others do not."""

    requirement: str
    backend: str
    layout: str
    why: str

    @property
    def name(self) -> str:
        return self.requirement.split("==")[0]


CORPUS = (
    CorpusRepo("more-itertools==10.5.0", "flit", "flat", "unittest TestCases run by pytest; the known-good reference"),
    CorpusRepo("six==1.16.0", "setuptools", "single-module", "one top-level module six.py and test_six.py beside it"),
    CorpusRepo(
        "python-dateutil==2.9.0.post0",
        "setuptools-scm",
        "src",
        "needs tzdata; its test dep freezegun requires python-dateutil itself",
    ),
    CorpusRepo(
        "jaraco.functools==4.1.0",
        "setuptools-scm",
        "namespace",
        "namespace package jaraco/, doctests in modules (--doctest-modules)",
    ),
    CorpusRepo("platformdirs==4.3.6", "hatchling+hatch-vcs", "src", "editable build needs `editables`; pytest-mock"),
    CorpusRepo("humanize==4.11.0", "hatchling+hatch-vcs", "src", "locale-dependent i18n tests, freezegun"),
    CorpusRepo("packaging==24.1", "flit", "src", "heavily parametrized pytest suite"),
    CorpusRepo("tomlkit==0.13.2", "poetry-core", "flat", "test deps only in poetry dev-dependencies"),
    CorpusRepo("dep-logic==0.4.9", "pdm-backend", "src", "pdm-backend editable build, nested test directories"),
    CorpusRepo(
        "toolz==1.0.0",
        "setuptools",
        "flat",
        "no pyproject build table (legacy), tests inside the package, doctest tests",
    ),
    CorpusRepo("cachetools==5.5.0", "setuptools", "src", "a suite written with unittest"),
    CorpusRepo(
        "h11==0.14.0",
        "setuptools",
        "flat",
        "78 tests inside the package (h11/tests), the size that should give 100 tasks; modules import each other",
    ),
    CorpusRepo(
        "pytz==2024.2",
        "setuptools",
        "flat",
        "no pyproject; unittest and doctest suite inside the package, ships tz data",
    ),
    CorpusRepo(
        "boltons==24.1.0",
        "setuptools",
        "flat",
        "no pyproject; many small modules and stateful containers; pytest.ini asks for doctests",
    ),
    # Of 49 projects checked, none changes its set of test ids with the hash seed; arrow changes their order (a set
    # comprehension of 559 zone names feeds two parametrizes), the nearest real case.
    CorpusRepo(
        "arrow==1.4.0",
        "flit",
        "flat",
        "parametrized over a set of time zone names (id order varies with the hash seed); needs tzdata",
    ),
)
# Small and quick enough for the network test: fast suites, few dependencies.
QUICK = ("six", "cachetools")


def _pip_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("ERROR")), lines[-1] if lines else "pip failed")


def download_sdist(requirement: str, cache_dir: Path) -> Path:
    """The sdist of `requirement`, from the cache or `pip download`; SynthError with pip's error when it cannot be
    had."""
    sdists = cache_dir / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    name, _, version = requirement.partition("==")
    stem = re.compile(rf"^{re.sub(r'[-_.]+', '[-_.]+', name)}-{re.escape(version)}\.(tar\.gz|zip)$", re.IGNORECASE)
    found = [path for path in sdists.iterdir() if stem.match(path.name)]
    if found:
        return found[0]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--no-binary",
        ":all:",
        requirement,
        "-d",
        str(sdists),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    found = [path for path in sdists.iterdir() if stem.match(path.name)]
    if result.returncode != 0 or not found:
        raise SynthError(
            f"cannot download the sdist of {requirement} ({_pip_error(result.stderr)}): check the pin and that PyPI is "
            "reachable"
        )
    return found[0]


def select(only: list[str] | None) -> list[CorpusRepo]:
    """The corpus entries named in `only` (all when empty); SynthError naming the known ones for an unknown name."""
    if not only:
        return list(CORPUS)
    known = {repo.name.lower(): repo for repo in CORPUS}
    unknown = [name for name in only if name.lower() not in known]
    if unknown:
        raise SynthError(f"not in the corpus: {', '.join(unknown)}: pick from {', '.join(sorted(known))}")
    return [known[name.lower()] for name in only]


def repo_row(
    repo: CorpusRepo, report: SynthReport | None = None, error: str | None = None, wall_s: float = 0.0
) -> dict[str, Any]:
    """One JSON row of the bench: what synthesis made of the repo, or the error that stopped it."""
    row: dict[str, Any] = {
        "name": repo.name,
        "requirement": repo.requirement,
        "backend": repo.backend,
        "layout": repo.layout,
        "why": repo.why,
    }
    candidates = report.candidates if report else 0
    valid = report.valid if report else 0
    row |= {
        "baseline_tests": report.baseline_tests if report else 0,
        "stable_tests": report.stable_tests if report else 0,
        "candidates": candidates,
        "offered": report.offered if report else 0,
        "valid": valid,
        "stopped_by": report.stopped_by if report else "error",
        "yield": round(valid / candidates, 3) if candidates else 0.0,
        "rejections": {reason: count for reason, count in sorted(report.rejections.items()) if count} if report else {},
        "tasks_per_hour": round(report.tasks_per_hour, 1) if report else 0.0,
        "wall_s": round(wall_s, 1),
        "error": error,
    }
    return row


def corpus_totals(rows: list[dict]) -> dict:
    """The corpus's sums, and tasks per repository (min, median, max) with how many repositories the cap stopped:
    where it stopped none, the repositories set the count."""
    wall = sum(row["wall_s"] for row in rows)
    valid = sum(row["valid"] for row in rows)
    per_repo = [row["valid"] for row in rows] or [0]
    return {
        "tasks_per_repo": {
            "min": min(per_repo),
            "median": statistics.median(per_repo),
            "max": max(per_repo),
        },
        "repos_stopped_by_cap": sum(row.get("stopped_by") == "max_tasks" for row in rows),
        "repos": len(rows),
        "repos_with_tasks": sum(1 for row in rows if row["valid"] > 0),
        "valid": valid,
        "candidates": sum(row["candidates"] for row in rows),
        "wall_s": round(wall, 1),
        "tasks_per_hour": round(3600 * valid / wall, 1) if wall else 0.0,
    }


def run_corpus_bench(
    settings: SynthSettings,
    repos: list[CorpusRepo] | None = None,
    backend: DockerBackend | None = None,
    on_repo: Callable[[str, int, int], None] | None = None,
) -> dict:
    """Synthesize from each repo's sdist with `settings`; one failing repo is recorded, never stops the bench.

    Task images are removed after each repo; wheelhouses, sdists and repo images stay cached under `settings.cache_dir`.
    """
    from task_synth.pipeline import synthesize

    backend = backend or DockerBackend()
    repos = list(CORPUS) if repos is None else repos
    rows = []
    for index, repo in enumerate(repos):
        if on_repo:
            on_repo(repo.name, index, len(repos))
        started = time.monotonic()
        report, error = None, None
        with tempfile.TemporaryDirectory(prefix="regrow-corpus-") as scratch:
            try:
                source = extract_sdist(download_sdist(repo.requirement, settings.cache_dir), Path(scratch) / "src")
                report = synthesize(str(source), Path(scratch) / "store", settings, backend=backend)
            except (SynthError, SandboxError) as failure:
                error = str(failure)
            except Exception as failure:  # a bug of ours: record it and go on with the other repos
                log.exception("%s: unexpected failure", repo.requirement)
                error = f"internal error: {type(failure).__name__}: {failure}"
        if report:
            for record in report.records:
                backend.remove_image(record.image)
        rows.append(repo_row(repo, report, error, time.monotonic() - started))
        # The whole row, so that an interrupted bench still leaves every finished repo's result in the log.
        log.info("%s: %s", repo.requirement, json.dumps(rows[-1]))
    if on_repo:
        on_repo("", len(repos), len(repos))
    return {
        "repos": rows,
        "totals": corpus_totals(rows),
        "max_tasks": settings.max_tasks,
        "candidate_budget": settings.candidate_budget,
    }


def repo_source(repo: str, cache_dir: Path, scratch: Path) -> str:
    """What synthesis reads for `--repo`: an sdist unpacked into `scratch`, a pinned requirement's sdist downloaded
    and unpacked there, or the path or URL as given."""
    if repo.endswith((".tar.gz", ".zip")) and Path(repo).is_file():
        return str(extract_sdist(Path(repo), scratch))
    if "==" in repo and not Path(repo).exists():
        return str(extract_sdist(download_sdist(repo, cache_dir), scratch))
    return repo
