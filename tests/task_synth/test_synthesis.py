"""Synthesis on the minilib fixture, end to end on the real Docker engine: tasks as files on one repository image,
the store, leaks, determinism."""

import ast
import base64
import importlib
import io
import json
import pickle
import shutil
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from env_server.lifecycle.provisioning import seed
from env_server.task_store import TaskStore
from proto.call_values import described_text, state_text
from proto.evidence import checks_by_unit, has_secret_evidence
from proto.task_files import read_records
from proto.tasks import IoCheck, TaskRecord
from task_synth.candidates.coverage_groups import group_unit
from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.pipeline import synthesize
from task_synth.repository.repo_layout import read_layout
from task_synth.settings import SynthSettings
from task_synth.store.task_builder import build_task, task_workspace
from task_synth.validation.canary_scan import archive_files, canaries_for, index_image, scan_files, scan_image
from task_synth.validation.recorded_calls import MAX_CHECKS, check_key
from task_synth.validation.repo_context import prepare_repo
from task_synth.validation.suite_runs import run_tests
from task_synth.validation.task_checks import check_task, workspace_text
from task_synth.validation.unseen_calls import MAX_UNSEEN
from task_synth.validation.verdict import validate

pytestmark = pytest.mark.docker
MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
SETTINGS = SynthSettings(modes=["stub", "remove", "file"], max_tasks=3, seed=0, jobs=2)


@pytest.fixture(scope="module")
def synthesized(docker_backend, base_image, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    report = synthesize(str(MINILIB), store, SETTINGS, backend=docker_backend)
    return report, store


def _task_sandbox(docker_backend, store: Path, record: TaskRecord):
    """A container of the repository image made into the task's, as the env server's reset does."""
    return seed(TaskStore(store).get(record.instance_id), docker_backend.create(record.image, workdir="/workspace"))


def _grade(docker_backend, record: TaskRecord, store: Path, apply_solution: bool) -> dict[str, bool]:
    """What the grader does: fresh container, pristine tests in, optionally the patch, then F2P + P2P."""
    hidden = store / "hidden" / record.instance_id
    with _task_sandbox(docker_backend, store, record) as sb:
        for test_file in record.test_files:
            sb.write_file(f"/workspace/{test_file}", (hidden / "tests" / test_file).read_bytes())
        if apply_solution:
            sb.write_file("/home/agent/solution.patch", (hidden / "solution.patch").read_text())
            assert sb.exec("git apply /home/agent/solution.patch", cwd="/workspace").exit_code == 0
        return run_tests(sb, record.test_command, record.FAIL_TO_PASS + record.PASS_TO_PASS, timeout=300).outcomes


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
        assert record.stats.fail_to_pass == len(record.FAIL_TO_PASS)
        assert record.stats.statement_chars == len(record.problem_statement)
    # Tasks are files on one repository image: a workspace archive each, one install archive and wheelhouse.
    assert {record.image for record in records} == {report.repo_image}
    assert {record.repo_dir for record in records} == {f"repos/minilib-{report.commit[:12]}"}
    repo = store / records[0].repo_dir
    assert (repo / "install.tar.gz").is_file() and any((repo / "wheels").glob("pytest-*.whl"))
    for record in records:
        names = [path for path, _ in archive_files((store / record.workspace_archive).read_bytes())]
        assert "workspace/src/minilib/__init__.py" in names and "workspace/.git/HEAD" in names
        assert not any(name.startswith("workspace/tests/") and name.endswith(".pyc") for name in names)
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
    report, store = synthesized
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
        with _task_sandbox(docker_backend, store, record) as sb:
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
    return [
        IoCheck.model_validate(check)
        for check in json.loads((store / "hidden" / record.instance_id / "io_checks.json").read_text())
    ]


@pytest.fixture
def original_minilib(monkeypatch):
    """The fixture's own minilib, importable in this process for as long as the test runs."""
    monkeypatch.syspath_prepend(str(MINILIB / "src"))
    yield
    for name in [name for name in sys.modules if name == "minilib" or name.startswith("minilib.")]:
        del sys.modules[name]


def _outcome_of_original(check: IoCheck) -> tuple[object, str | None, object]:
    """(result described, raised, receiver) of the check's call on the original code, loaded here."""
    receiver, arguments = pickle.loads(base64.b64decode(check.inputs)) if check.inputs else (None, None)
    args, kwargs = arguments or (ast.literal_eval(check.args), ast.literal_eval(check.kwargs))
    if receiver is not None:
        function = getattr(receiver, check.qualname.rpartition(".")[2])
    else:
        function = getattr(importlib.import_module(check.module), check.qualname)
    try:
        return ast.literal_eval(described_text(function(*args, **kwargs)) or "None"), None, receiver
    except Exception as error:
        return None, type(error).__name__, receiver


def test_every_task_has_hidden_io_checks_and_names_its_pytest_plugins(synthesized):
    report, store = synthesized
    for record in report.records:
        assert _io_checks(store, record) == report.io_checks[record.instance_id], record.instance_id
        assert isinstance(record.pytest_plugins, list) and "regrow_io_recorder" not in record.pytest_plugins
        assert "io_checks" not in record.model_dump_json()
        if record.deleted[0].kind == "class":  # a whole class is checked by the programs its tests ran
            assert all(check.steps for check in report.io_checks[record.instance_id]), record.instance_id


def test_a_method_task_gets_checks_that_the_original_method_passes_on_the_recorded_receiver(
    docker_backend, base_image, tmp_path, original_minilib
):
    """`BoundedStack.push` made into a task: each check replays a call on the receiver as it was (unpickled here,
    against the original class) and expects the original's outcome and the receiver's attributes after it; its
    mutants are measured and the checks kill enough of them to keep the task."""
    created: list[str] = []
    context = prepare_repo(str(MINILIB), SETTINGS, docker_backend, tmp_path, created)
    units = {(unit.kind, unit.qualname): unit for unit in enumerate_units(context.layout)}
    deletion = delete_unit(context.layout, units["method", "BoundedStack.push"], "stub")
    module = context.layout.modules[deletion.unit.path]
    with context.sandbox() as sb:
        verdict = validate(sb, context.baseline, deletion, module, SETTINGS)
    assert verdict.rejection is None, verdict
    workspace = task_workspace(context, deletion)
    checked = check_task(context, deletion, verdict, workspace.archive, workspace.patch)
    built = build_task(context, deletion, workspace, checked)
    assert built.record is not None, (built.rejection, built.detail)
    stats = built.record.stats
    assert stats.hidden_checks == len(built.io_checks) > 0 and stats.mutants > 0, stats
    assert stats.mutant_kill_rate is not None and stats.mutant_kill_rate >= SETTINGS.min_kill_rate, stats
    assert any(check.test is None for check in built.io_checks), "no unseen call of the method"
    for check in built.io_checks:
        assert check.qualname == "BoundedStack.push" and check.inputs and check.state is not None, check
        result, raised, receiver = _outcome_of_original(check)
        assert raised == check.raises, check
        assert check.raises or result == ast.literal_eval(check.result or "None"), check
        expected = ast.literal_eval(check.state)
        assert ast.literal_eval(state_text(receiver) or "{}") == expected, check


def test_function_tasks_get_io_checks_that_the_original_function_passes(synthesized, original_minilib):
    report, store = synthesized
    function_tasks = [
        record for record in report.records if record.deleted[0].kind in ("function", "feature", "module")
    ]
    assert function_tasks, "the fixture run has no function, feature or module task to record checks of"
    for record in function_tasks:
        checks = _io_checks(store, record)
        # Each unit has its own budget of checks, and secret evidence of its own.
        for own in checks_by_unit(checks, record.deleted).values():
            linked = [check for check in own if check.test is not None]
            assert len(linked) <= MAX_CHECKS and len(own) - len(linked) <= MAX_UNSEEN, record.instance_id
            assert has_secret_evidence(own), record.instance_id
        # A linked call's test is a visible test of the unit: a FAIL_TO_PASS one, or one a trivial stand-in passes.
        assert all(check.test.split("::")[0] in record.test_files for check in checks if check.test), record.instance_id
        deleted = record.deleted[0]
        for check in checks:
            assert check.module == read_layout(MINILIB).modules[deleted.path], check
            # A group's checks call any of its parts.
            assert check.qualname in {part.qualname for part in record.deleted} or deleted.kind == "module", check
            result, raised, _ = _outcome_of_original(check)
            assert raised == check.raises, check
            assert check.raises or result == ast.literal_eval(check.result or "None"), check


def test_some_function_task_gets_checks_of_calls_no_visible_test_makes(synthesized):
    """Unseen checks: perturbed arguments of recorded calls, none of them a call a visible test made."""
    report, store = synthesized
    unseen = {
        record.instance_id: [check for check in _io_checks(store, record) if check.test is None]
        for record in report.records
    }
    assert any(unseen.values()), unseen
    for record in report.records:
        # A class's checks are programs: two with the arguments `()` differ in their steps.
        linked = {check_key(check) for check in _io_checks(store, record) if check.test is not None}
        assert not linked & {check_key(check) for check in unseen[record.instance_id]}, record.instance_id


def _deletion_of(record: TaskRecord):
    layout = read_layout(MINILIB)
    units = {(u.path, u.qualname, u.kind): u for u in enumerate_units(layout)}
    parts = [units[deleted.path, deleted.qualname, deleted.kind] for deleted in record.deleted]
    unit = parts[0] if len(parts) == 1 else group_unit(parts)
    return layout, delete_unit(layout, unit, record.mode)


@pytest.fixture(scope="module")
def repo_index(synthesized, docker_backend):
    index, hits = index_image(docker_backend, synthesized[0].repo_image, ["minilib"])
    assert hits == [], "the repository image holds an installed copy of minilib or a cache"
    return index


def _canaries(record, store, repo_index):
    layout, deletion = _deletion_of(record)
    archive = (store / record.workspace_archive).read_bytes()
    return layout, deletion, canaries_for(deletion, workspace_text(archive), repo_index.tokens)


def test_task_files_and_the_repo_image_have_no_canary_hits(synthesized, docker_backend, repo_index):
    report, store = synthesized
    install = (store / report.records[0].repo_dir / "install.tar.gz").read_bytes()
    for record in report.records:
        layout, _, canaries = _canaries(record, store, repo_index)
        assert canaries, "every accepted task has canaries (else it is unscannable)"
        files = [*archive_files((store / record.workspace_archive).read_bytes()), *archive_files(install)]
        assert scan_files(files, canaries, set(layout.test_files), ["minilib"]) == []
        assert scan_image(docker_backend, record.image, canaries, set(layout.test_files), ["minilib"]) == []


def test_planted_leaks_are_caught_by_the_scan(synthesized, docker_backend, repo_index, tmp_path):
    """A stale .pyc of the original module, a .mypy_cache holding the deleted code, and a copy inside a wheel all
    hit."""
    import py_compile

    report, store = synthesized
    # A task whose deleted code has a name of its own that the image lacks (some have only distinctive lines).
    record, (layout, deletion, canaries) = next(
        (record, found) for record in report.records if (found := _canaries(record, store, repo_index))[2].identifiers
    )
    context = tmp_path / "leaky"
    context.mkdir()
    py_compile.compile(str(MINILIB / deletion.unit.path), cfile=str(context / "stale.pyc"))
    (context / "meta.json").write_text(json.dumps({"source": (MINILIB / deletion.unit.path).read_text()}))
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("vendored/copy.py", (MINILIB / deletion.unit.path).read_text())
    (context / "vendored-0.1-py3-none-any.whl").write_bytes(wheel.getvalue())
    (context / "Dockerfile").write_text(
        "ARG TASK_IMAGE\nFROM ${TASK_IMAGE}\n"
        "COPY stale.pyc /usr/lib/python3/dist-packages/__pycache__/stale.cpython-311.pyc\n"
        "COPY meta.json /workspace/.mypy_cache/3.11/minilib/meta.json\n"
        "COPY vendored-0.1-py3-none-any.whl /usr/share/python-wheels/vendored-0.1-py3-none-any.whl\n"
    )
    leaky = "regrow/test-leaky-task:planted"
    docker_backend.client.images.build(
        path=str(context), tag=leaky, buildargs={"TASK_IMAGE": record.image}, network_mode="none", rm=True
    )
    # The planted files sit on the repository image; the workspace that a reset writes is scanned on its own.
    try:
        hits = scan_image(docker_backend, leaky, canaries, set(layout.test_files), ["minilib"])
    finally:
        docker_backend.client.images.remove(leaky, force=True)
    by_path = {}
    for hit in hits:
        by_path.setdefault(hit.path, set()).add(hit.canary)
    assert by_path["usr/lib/python3/dist-packages/__pycache__/stale.cpython-311.pyc"] <= {
        c.decode() for c in canaries.identifiers | canaries.literals
    }
    assert "cache left behind" in by_path["workspace/.mypy_cache/3.11/minilib/meta.json"]
    assert len(by_path["workspace/.mypy_cache/3.11/minilib/meta.json"]) == 2  # the cache itself and a canary in it
    assert by_path["usr/share/python-wheels/vendored-0.1-py3-none-any.whl!vendored/copy.py"]


def test_same_seed_gives_the_same_task_whatever_the_jobs(synthesized, docker_backend, tmp_path):
    report, _ = synthesized
    first = next(r for r in report.records if r.mode == "stub")
    again = synthesize(
        str(MINILIB),
        tmp_path / "again",
        SETTINGS.model_copy(update={"modes": ["stub"], "max_tasks": 1, "jobs": 1}),
        backend=docker_backend,
    )
    assert len(again.records) == 1
    second = again.records[0]
    fields = ("instance_id", "image", "FAIL_TO_PASS", "PASS_TO_PASS", "solution_patch", "problem_statement", "deleted")
    assert {f: getattr(second, f) for f in fields} == {f: getattr(first, f) for f in fields}
    # The same files with the same bytes; git's index alone holds the host's stat data and differs.
    files = [
        {
            path: data
            for path, data in archive_files((run.out_dir / record.workspace_archive).read_bytes())
            if path != "workspace/.git/index"
        }
        for run, record in ((again, second), (report, first))
    ]
    assert files[0] == files[1]
    assert again.io_checks[second.instance_id] == report.io_checks[first.instance_id]


def test_a_copied_store_is_served_after_images_build_alone(synthesized, docker_backend, tmp_path):
    """Another host has the store's files but not its repository image: `regrow images build --tasks` rebuilds it."""
    import uuid

    from typer.testing import CliRunner

    from regrow.cli import app

    _, store = synthesized
    copy = tmp_path / "copied-store"
    shutil.copytree(store, copy)
    tag = f"regrow/test-copied-repo:{uuid.uuid4().hex[:12]}"  # a tag this engine has never seen
    records = [record.model_copy(update={"image": tag}) for record in read_records(copy)]
    (copy / "tasks.jsonl").write_text("".join(record.model_dump_json() + "\n" for record in records))
    assert TaskStore(copy).missing_images(docker_backend.image_exists) == [tag]
    result = CliRunner().invoke(app, ["images", "build", "--tasks", str(copy)])
    try:
        assert result.exit_code == 0, result.output
        assert f"{tag}: built" in result.output and docker_backend.image_exists(tag)
        record = records[0]
        with _task_sandbox(docker_backend, copy, record) as sb:
            imported = sb.exec("python -c 'import minilib, sys; print(minilib.__file__)'", cwd="/workspace")
        assert imported.stdout.strip() == "/workspace/src/minilib/__init__.py", imported.stderr
    finally:
        docker_backend.client.images.remove(tag, force=True)
