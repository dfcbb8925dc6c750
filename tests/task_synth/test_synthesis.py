"""Synthesis on the minilib fixture, end to end on the real Docker engine: tasks, store, images, leaks, determinism."""

import ast
import importlib
import json
import shlex
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from proto.tasks import IoCheck, TaskRecord
from task_synth.candidates import enumerate_units
from task_synth.canary_scan import canaries_for, image_tokens, scan_image
from task_synth.deletion import delete_unit
from task_synth.io_recording import MAX_CHECKS, MAX_UNSEEN
from task_synth.pipeline import synthesize
from task_synth.repo_layout import read_layout
from task_synth.settings import SynthSettings
from task_synth.task_builder import workspace_text
from task_synth.task_store import read_records
from task_synth.test_runs import parse_junit

pytestmark = pytest.mark.docker
MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
SETTINGS = SynthSettings(modes=["stub", "remove", "file"], max_tasks=3, seed=0, jobs=2)


def _remove_images(backend, records):
    for record in records:
        try:
            backend.client.images.remove(record.image, force=True)
        except Exception:
            pass


@pytest.fixture(scope="module")
def synthesized(docker_backend, base_image, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    report = synthesize(str(MINILIB), store, SETTINGS, backend=docker_backend)
    yield report, store
    _remove_images(docker_backend, report.records)


def _grade(docker_backend, record: TaskRecord, store: Path, apply_solution: bool) -> dict[str, bool]:
    """What the grader does: fresh container, pristine tests in, optionally the patch, then F2P + P2P."""
    hidden = store / "hidden" / record.instance_id
    with docker_backend.create(record.image, workdir="/workspace") as sb:
        for test_file in record.test_files:
            sb.write_file(f"/workspace/{test_file}", (hidden / "tests" / test_file).read_bytes())
        if apply_solution:
            sb.write_file("/home/agent/solution.patch", (hidden / "solution.patch").read_text())
            assert sb.exec("git apply /home/agent/solution.patch", cwd="/workspace").exit_code == 0
        command = f"{record.test_command} --junitxml=/home/agent/junit.xml " + shlex.join(record.FAIL_TO_PASS + record.PASS_TO_PASS)
        sb.exec(command, timeout=300, cwd="/workspace")
        return parse_junit(sb.read_file("/home/agent/junit.xml").decode())


def test_synthesis_yields_a_valid_task_in_every_mode(synthesized):
    report, _ = synthesized
    assert report.valid == 3
    assert sorted(record.mode for record in report.records) == ["file", "remove", "stub"]
    for record in report.records:
        assert len(record.FAIL_TO_PASS) >= 1 and len(record.PASS_TO_PASS) >= 1
        assert not set(record.FAIL_TO_PASS) & set(record.PASS_TO_PASS)
        assert record.deleted[0].qualname in record.problem_statement or record.mode == "file"


def test_store_follows_the_task_store_contract(synthesized):
    report, store = synthesized
    records = read_records(store)
    assert [r.instance_id for r in records] == [r.instance_id for r in report.records]
    for record in records:
        hidden = store / "hidden" / record.instance_id
        assert (hidden / "solution.patch").read_text() == record.solution_patch
        assert "tests/test_textops.py" in record.test_files
        for test_file in record.test_files:
            assert (hidden / "tests" / test_file).read_bytes() == (MINILIB / test_file).read_bytes()
        assert record.split == "train" and record.stats.lines_deleted > 0
    table = pq.read_table(store / "tasks.parquet")
    assert table.column("instance_id").to_pylist() == [r.instance_id for r in records]
    assert json.loads(json.dumps(table.to_pylist()[0]["deleted"]))[0]["kind"] == records[0].deleted[0].kind


def test_every_task_passes_its_oracle_and_fails_without_it(synthesized, docker_backend):
    report, store = synthesized
    for record in report.records:
        before = _grade(docker_backend, record, store, apply_solution=False)
        assert not any(before.get(test, False) for test in record.FAIL_TO_PASS), record.instance_id
        if record.mode == "stub":  # elsewhere F2P files do not import, and pytest then runs no node id at all
            assert all(before[test] for test in record.PASS_TO_PASS), record.instance_id
        after = _grade(docker_backend, record, store, apply_solution=True)
        assert all(after.get(test, False) for test in record.FAIL_TO_PASS + record.PASS_TO_PASS), record.instance_id


def test_every_workspace_is_one_commit_without_caches_or_installed_copy(synthesized, docker_backend):
    report, _ = synthesized
    checks = {
        "commits": "git rev-list --all --count",
        "refs": "git for-each-ref | wc -l",
        "remotes": "git remote | wc -l",
        "dirty": "git status --porcelain --ignored | wc -l",
        "caches": "find /workspace /opt/venv /home/agent \\( -name __pycache__ -o -name '*.pyc' -o -name .mypy_cache "
        "-o -name .pytest_cache -o -name '*.egg-info' \\) | wc -l",
        "owner": "stat -c %u /workspace/src/minilib",
        "python": "command -v python",
        "installed_at": "python -c 'import minilib; print(minilib.__file__)'",
        "site_copy": "ls /opt/venv/lib/python3*/site-packages | grep -c '^minilib$' || true",
    }
    for record in report.records:
        with docker_backend.create(record.image, workdir="/workspace") as sb:
            found = {name: sb.exec(command, cwd="/workspace").stdout.strip() for name, command in checks.items()}
        assert found == {
            "commits": "1",
            "refs": "1",
            "remotes": "0",
            "dirty": "0",
            "caches": "0",
            "owner": "1000",
            "python": "/opt/venv/bin/python",
            "installed_at": "/workspace/src/minilib/__init__.py",
            "site_copy": "0",
        }, record.instance_id


def _io_checks(store: Path, record: TaskRecord) -> list[IoCheck]:
    return [IoCheck.model_validate(check) for check in json.loads((store / "hidden" / record.instance_id / "io_checks.json").read_text())]


@pytest.fixture
def original_minilib(monkeypatch):
    """The fixture's own minilib, importable in this process for as long as the test runs."""
    monkeypatch.syspath_prepend(str(MINILIB / "src"))
    yield
    for name in [name for name in sys.modules if name == "minilib" or name.startswith("minilib.")]:
        del sys.modules[name]


def _outcome_of_original(check: IoCheck) -> tuple[object, str | None]:
    function = getattr(importlib.import_module(check.module), check.qualname)
    try:
        return function(*ast.literal_eval(check.args), **ast.literal_eval(check.kwargs)), None
    except Exception as error:
        return None, type(error).__name__


def test_every_task_has_hidden_io_checks_and_names_its_pytest_plugins(synthesized):
    report, store = synthesized
    for record in report.records:
        assert _io_checks(store, record) == report.io_checks[record.instance_id], record.instance_id
        assert isinstance(record.pytest_plugins, list) and "regrow_io_recorder" not in record.pytest_plugins
        assert "io_checks" not in record.model_dump_json()
        if record.deleted[0].kind in ("class", "method"):
            assert report.io_checks[record.instance_id] == [], record.instance_id


def test_function_tasks_get_io_checks_that_the_original_function_passes(synthesized, original_minilib):
    report, store = synthesized
    function_tasks = [record for record in report.records if record.deleted[0].kind in ("function", "feature", "module")]
    assert function_tasks, "the fixture run has no function, feature or module task to record checks of"
    for record in function_tasks:
        checks = _io_checks(store, record)
        linked = [check for check in checks if check.test is not None]
        assert 1 <= len(linked) <= MAX_CHECKS and len(checks) - len(linked) <= MAX_UNSEEN, record.instance_id
        assert {check.test for check in linked} <= set(record.FAIL_TO_PASS), record.instance_id
        deleted = record.deleted[0]
        for check in checks:
            assert check.module == read_layout(MINILIB).modules[deleted.path], check
            assert check.qualname == deleted.qualname or deleted.kind == "module", check
            result, raised = _outcome_of_original(check)
            assert raised == check.raises, check
            assert check.raises or result == ast.literal_eval(check.result), check


def test_some_function_task_gets_checks_of_calls_no_visible_test_makes(synthesized):
    """Unseen checks: perturbed arguments of recorded calls, none of them a call a visible test made."""
    report, store = synthesized
    unseen = {record.instance_id: [check for check in _io_checks(store, record) if check.test is None] for record in report.records}
    assert any(unseen.values()), unseen
    for record in report.records:
        linked = {(check.qualname, check.args, check.kwargs) for check in _io_checks(store, record) if check.test is not None}
        assert not linked & {(check.qualname, check.args, check.kwargs) for check in unseen[record.instance_id]}, record.instance_id


def _deletion_of(record: TaskRecord):
    layout = read_layout(MINILIB)
    deleted = record.deleted[0]
    unit = next(u for u in enumerate_units(layout) if (u.path, u.qualname, u.kind) == (deleted.path, deleted.qualname, deleted.kind))
    return layout, delete_unit(layout, unit, record.mode)


@pytest.fixture(scope="module")
def repo_tokens(synthesized, docker_backend):
    return image_tokens(docker_backend, synthesized[0].repo_image)


def _canaries(record, repo_tokens, tmp_path):
    layout, deletion = _deletion_of(record)
    workspace = tmp_path / f"ws-{record.instance_id}"
    shutil.copytree(MINILIB, workspace)
    for path, text in deletion.changed.items():
        (workspace / path).unlink() if text is None else (workspace / path).write_text(text)
    return layout, deletion, canaries_for(deletion, workspace_text(workspace), repo_tokens)


def test_task_images_have_no_canary_hits(synthesized, docker_backend, repo_tokens, tmp_path):
    report, _ = synthesized
    for record in report.records:
        layout, _, canaries = _canaries(record, repo_tokens, tmp_path)
        if record.mode == "file":
            assert canaries, "a deleted module always leaves distinctive names behind"
        assert scan_image(docker_backend, record.image, canaries, set(layout.test_files), ["minilib"]) == []


def test_planted_leaks_are_caught_by_the_scan(synthesized, docker_backend, repo_tokens, tmp_path):
    """A stale .pyc of the original module and a .mypy_cache holding the deleted code both hit."""
    import py_compile

    report, _ = synthesized
    record = next(r for r in report.records if r.mode == "stub")
    layout, deletion, canaries = _canaries(record, repo_tokens, tmp_path)
    assert canaries.identifiers
    context = tmp_path / "leaky"
    context.mkdir()
    py_compile.compile(str(MINILIB / deletion.unit.path), cfile=str(context / "stale.pyc"))
    (context / "meta.json").write_text(json.dumps({"source": (MINILIB / deletion.unit.path).read_text()}))
    (context / "Dockerfile").write_text(
        "ARG TASK_IMAGE\nFROM ${TASK_IMAGE}\n"
        "COPY stale.pyc /usr/lib/python3/dist-packages/__pycache__/stale.cpython-311.pyc\n"
        "COPY meta.json /workspace/.mypy_cache/3.11/minilib/meta.json\n"
    )
    leaky = "regrow/test-leaky-task:planted"
    docker_backend.client.images.build(path=str(context), tag=leaky, buildargs={"TASK_IMAGE": record.image}, network_mode="none", rm=True)
    try:
        hits = scan_image(docker_backend, leaky, canaries, set(layout.test_files), ["minilib"])
    finally:
        docker_backend.client.images.remove(leaky, force=True)
    by_path = {}
    for hit in hits:
        by_path.setdefault(hit.path, set()).add(hit.canary)
    assert by_path["usr/lib/python3/dist-packages/__pycache__/stale.cpython-311.pyc"] <= {c.decode() for c in canaries.identifiers}
    assert "cache left behind" in by_path["workspace/.mypy_cache/3.11/minilib/meta.json"]
    assert len(by_path["workspace/.mypy_cache/3.11/minilib/meta.json"]) == 2  # the cache itself and a canary in it


def test_same_seed_gives_the_same_task_whatever_the_jobs(synthesized, docker_backend, tmp_path):
    report, _ = synthesized
    first = next(r for r in report.records if r.mode == "stub")
    again = synthesize(str(MINILIB), tmp_path / "again", SETTINGS.model_copy(update={"modes": ["stub"], "max_tasks": 1, "jobs": 1}), backend=docker_backend)
    assert len(again.records) == 1
    second = again.records[0]
    fields = ("instance_id", "image", "FAIL_TO_PASS", "PASS_TO_PASS", "solution_patch", "problem_statement", "deleted")
    assert {f: getattr(second, f) for f in fields} == {f: getattr(first, f) for f in fields}
    assert again.io_checks[second.instance_id] == report.io_checks[first.instance_id]
