"""Opt-in (REGROW_TEST_NETWORK=1): the red team of test_red_team.py against tasks synthesized from real
repositories fetched from PyPI, one task of each kind each repository yields, graded by a live runtime on the real
engine. Every forgery earns 0 on every task; the task's own code earns 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from env_server.task_store import Task
from regrow.bench.corpus import download_sdist
from sandbox.archive_extraction import extract_archive
from task_synth.pipeline import synthesize
from task_synth.settings import SynthSettings
from tests.env_server.conftest import live_runtime
from tests.env_server.test_red_team import KINDS, deleted_state, forgeries, play

pytestmark = [
    pytest.mark.network,
    pytest.mark.docker,
    pytest.mark.timeout(7200),
    pytest.mark.skipif(
        os.environ.get("REGROW_TEST_NETWORK") != "1", reason="fetches from PyPI; set REGROW_TEST_NETWORK=1"
    ),
]
# Two shapes: toolz's units take callables and are reached in groups; more-itertools' are generators and classes.
REPOSITORIES = ("toolz==0.12.1", "more-itertools==10.5.0")
CANDIDATES_PER_KIND = 10


def _unpacked(requirement: str, folder: Path) -> Path:
    archive = download_sdist(requirement, folder / "sdists")
    extract_archive(archive, folder / "src")
    return next(path for path in (folder / "src").iterdir() if path.is_dir())


@pytest.fixture(scope="module")
def real_tasks(docker_backend, base_image, tmp_path_factory):
    """(repository, kind, its source folder) for each kind each repository yielded, and the live runtime over them."""
    store, found = tmp_path_factory.mktemp("real-red-team-store"), []
    for requirement in REPOSITORIES:
        source = _unpacked(requirement, tmp_path_factory.mktemp(requirement.split("==")[0]))
        for kind in KINDS:
            settings = SynthSettings(modes=["stub"], kinds=[kind], max_tasks=1, max_candidates=CANDIDATES_PER_KIND)
            report = synthesize(str(source), store, settings, backend=docker_backend)
            found += [(requirement, record.instance_id, source) for record in report.records]
    with live_runtime(docker_backend, store, tmp_path_factory.mktemp("rt")) as live:
        yield live, found


def _package_init(task: Task, source: Path) -> str:
    """The top package's `__init__.py` above the task's first unit, as a path in the workspace."""
    folder = Path(task.record.deleted[0].path).parent
    while (source / folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return str(folder / "__init__.py")


def test_each_kind_of_task_comes_from_a_real_repository_and_each_repository_gives_two_kinds(real_tasks):
    runtime, found = real_tasks
    kinds = {(requirement, _kind(runtime.store.tasks[task_id])) for requirement, task_id, _ in found}
    assert {kind for _, kind in kinds} == set(KINDS), kinds
    assert all(sum(1 for owner, _ in kinds if owner == requirement) >= 2 for requirement in REPOSITORIES), kinds


def _kind(task: Task) -> str:
    units = task.record.deleted
    return "group" if len(units) > 1 else units[0].kind


def test_the_tasks_own_code_earns_one_and_no_forgery_earns_anything(real_tasks):
    runtime, found = real_tasks
    rows = []
    for requirement, task_id, source in found:
        task = runtime.store.tasks[task_id]
        original = {unit.path: (source / unit.path).read_text() for unit in task.record.deleted}
        details = play(runtime, task, original)
        rows.append((requirement, _kind(task), "original", details["reward"], details["units_credited"]))
        init = _package_init(task, source)
        for name, forge in forgeries(init, deleted_state(task, init)).items():
            forged = play(runtime, task, forge(task))
            rows.append((requirement, _kind(task), name, forged["reward"], forged["units_credited"]))
    print("\n".join(f"REAL RED TEAM {row}" for row in rows))
    assert all(reward == 1.0 for _, _, name, reward, _ in rows if name == "original"), rows
    assert all(reward == 0.0 and credited == 0 for _, _, name, reward, credited in rows if name != "original"), rows
