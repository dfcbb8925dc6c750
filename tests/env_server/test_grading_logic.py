"""The grader's pure logic, without an engine: path policy, change sets, hidden suites and the hardened pytest run."""

import ast
import io
import json
import random
import tarfile

import pytest

from env_server.change_set import ChangeSet, SubmissionTooLarge, archive_of, compare, differs_from, read_tree
from env_server.grading_run import (
    UnsupportedTestCommand,
    launcher_source,
    parse_report,
    pytest_arguments,
    pytest_config,
    pytest_options,
)
from env_server.hidden_checks import build_hidden_suite
from env_server.path_policy import PathPolicy
from proto.tasks import IoCheck

PRISTINE = {
    "pyproject.toml": b"[project]\n",
    "calc/__init__.py": b"",
    "calc/ops.py": b"def f(): ...\n",
    "tests/__init__.py": b"",
    "tests/test_ops.py": b"def test(): ...\n",
    "README.md": b"hi\n",
}


def policy() -> PathPolicy:
    return PathPolicy.for_task(["tests/test_ops.py"], ["calc/ops.py"], set(PRISTINE))


@pytest.mark.parametrize(
    "path",
    [
        "tests/test_ops.py",
        "tests/helpers.py",
        "calc/test_more.py",
        "calc/more_test.py",
        "conftest.py",
        "calc/conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "noxfile.py",
        "setup.py",
        "calc/evil.pth",
        "sitecustomize.py",
        "calc/usercustomize.py",
        "sitecustomize/__init__.py",
        "evil-1.0.dist-info/entry_points.txt",
        "calc.egg-info/PKG-INFO",
        "calc/_speed.so",
        "calc/ops.pyc",
    ],
)
def test_policy_refuses_what_decides_how_tests_run(path):
    assert policy().refusal(path, is_new=path not in PRISTINE)


@pytest.mark.parametrize(
    "path", ["pytest.py", "_pytest/__init__.py", "shlex.py", "src/json.py", "pluggy/x.py", "lib/os.py"]
)
def test_policy_refuses_new_top_level_modules(path):
    assert "top-level module" in policy().refusal(path, is_new=True)


@pytest.mark.parametrize(
    "path", ["calc/ops.py", "calc/_bounds.py", "calc/sub/deep.py", "notes.txt", "docs/guide.md", "calc/data.json"]
)
def test_policy_allows_the_package_and_plain_files(path):
    assert policy().refusal(path, is_new=path not in PRISTINE) is None


def test_the_folder_above_a_deleted_units_top_package_is_an_import_root():
    nested = PathPolicy.for_task([], ["pkgs/calc/ops.py"], {"pkgs/calc/__init__.py", "pkgs/calc/ops.py"})
    assert nested.refusal("pkgs/inspect.py", is_new=True)
    assert nested.refusal("pkgs/calc/inspect.py", is_new=True) is None


def tar_stream(files: dict[str, bytes], links: dict[str, str] | None = None, top: str = "workspace") -> list[bytes]:
    """A tar as the engine's archive API sends a directory: under its own name, in small chunks."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, data in files.items():
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for path, target in (links or {}).items():
            info = tarfile.TarInfo(f"{top}/{path}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    data = buffer.getvalue()
    return [data[i : i + 777] for i in range(0, len(data), 777)]


def changes_of(submitted: dict[str, bytes], links: dict[str, str] | None = None, cap: int = 1 << 20) -> ChangeSet:
    pristine = read_tree(tar_stream(PRISTINE))
    return compare(pristine, read_tree(tar_stream(submitted, links), differs_from(pristine), cap), policy(), cap)


def test_change_set_holds_added_modified_and_deleted_files():
    submitted = {**PRISTINE, "calc/ops.py": b"def f(): return 1\n", "calc/_new.py": b"X = 1\n"}
    del submitted["README.md"]
    changes = changes_of(submitted)
    assert changes.written == {"calc/ops.py": b"def f(): return 1\n", "calc/_new.py": b"X = 1\n"}
    assert changes.deleted == ["README.md"] and changes.refused == {}


def test_change_set_refuses_test_edits_deletions_links_and_oversized_files():
    submitted = {**PRISTINE, "tests/test_ops.py": b"def test(): assert True\n", "calc/big.py": b"#" * 100}
    del submitted["tests/__init__.py"]
    changes = changes_of(submitted, links={"calc/x.py": "../tests/conftest.py"}, cap=50)
    assert set(changes.refused) == {"tests/test_ops.py", "tests/__init__.py", "calc/x.py", "calc/big.py"}
    assert "symbolic link" in changes.refused["calc/x.py"]
    assert changes.refused["tests/__init__.py"].startswith("deleted:")
    assert changes.written == {} and changes.deleted == []


def test_version_control_and_caches_are_neither_compared_nor_written():
    submitted = {**PRISTINE, ".git/config": b"[filter]\n", "calc/__pycache__/ops.cpython-311.pyc": b"x", "x.pyc": b"y"}
    assert changes_of(submitted) == ChangeSet()


def test_a_file_whose_name_looks_like_a_patch_header_is_just_a_new_file():
    name = "calc/x.py\ndiff --git a"
    changes = changes_of({**PRISTINE, name: b"import os\n", f"{name}/tests/conftest.py b": b"import os\n"})
    assert list(changes.written) == [name] and list(changes.refused) == [f"{name}/tests/conftest.py b"]


def test_the_counterfactual_keeps_the_task_state_of_the_units_files():
    changes = changes_of({**PRISTINE, "calc/ops.py": b"def f(): return 1\n", "calc/_new.py": b"X = 1\n"})
    assert set(changes.without_modules({"calc/ops.py"}).written) == {"calc/_new.py"}


def test_the_counterfactual_drops_a_package_that_would_shadow_the_units_module():
    submitted = {**PRISTINE, "calc/ops/__init__.py": b"def f(): return 1\n", "calc/operators.py": b""}
    del submitted["calc/ops.py"]
    counterfactual = changes_of(submitted).without_modules({"calc/ops.py"})
    assert set(counterfactual.written) == {"calc/operators.py"} and counterfactual.deleted == []


def test_a_tree_over_its_entry_limit_is_refused_whole():
    with pytest.raises(SubmissionTooLarge):
        read_tree(tar_stream({f"f{n}.txt": b"" for n in range(20)}), max_entries=10)


def test_the_archive_of_a_change_set_is_owned_by_the_agent_and_keeps_executables():
    files = {"calc/new/run.sh": b"#!/bin/sh\n", "calc/ops.py": b"x = 1\n"}
    with tarfile.open(fileobj=io.BytesIO(archive_of(files, {"calc/new/run.sh"}))) as archive:
        members = {member.name: member for member in archive}
    assert set(members) == {"calc", "calc/new", "calc/new/run.sh", "calc/ops.py"}
    assert members["calc/new/run.sh"].mode == 0o755 and members["calc/ops.py"].mode == 0o644
    assert {member.uid for member in members.values()} == {1000}


CHECKS = [
    IoCheck(module="calc.ops", qualname="clamp", args="(-5, 0, 10)", result="0"),
    IoCheck(module="calc.ops", qualname="clamp", args="(1, 5, 0)", raises="ValueError"),
    IoCheck(module="calc.ops", qualname="clamp", args="(0.5, 0.0, 1.0)", result="0.5"),
]


def run_suite(suite, namespace_extra):
    """Execute the suite's source with a stand-in `calc.ops`; returns the outcome of each test by role."""
    import sys
    import types

    package, module = types.ModuleType("calc"), types.ModuleType("calc.ops")
    module.clamp = namespace_extra
    package.ops = module
    sys.modules.update({"calc": package, "calc.ops": module})
    try:
        namespace: dict = {}
        exec(compile(suite.source, suite.path, "exec"), namespace)
        results = {}
        for test in suite.tests:
            try:
                namespace[test.name]()
                results[test.name] = True
            except (Exception, pytest.fail.Exception):  # pytest.raises fails with a BaseException
                results[test.name] = False
        return results
    finally:
        del sys.modules["calc"], sys.modules["calc.ops"]


def clamp(value, low, high):
    if low > high:
        raise ValueError("low > high")
    return max(low, min(value, high))


def test_hidden_checks_pass_with_the_right_unit_and_sentinels_fail_in_every_honest_run():
    suite = build_hidden_suite(CHECKS, "tests", random.Random(7))
    for implementation in (clamp, lambda value, low, high: value, lambda *args: None):
        results = run_suite(suite, implementation)
        assert not any(results[t.name] for t in suite.of_role("sentinel"))
        assert all(results[t.name] for t in suite.of_role("control"))
    right = run_suite(suite, clamp)
    assert all(right[t.name] for t in suite.of_role("check"))
    wrong = run_suite(suite, lambda value, low, high: value)
    assert not all(wrong[t.name] for t in suite.of_role("check"))


def test_an_always_equal_result_trips_a_sentinel():
    class AlwaysEqual:
        def __eq__(self, other):
            return True

    suite = build_hidden_suite(CHECKS, "tests", random.Random(3))
    results = run_suite(suite, lambda *args: AlwaysEqual())
    assert any(results[t.name] for t in suite.of_role("sentinel") if "calc.ops" in t.label)


def test_hidden_tests_look_alike_and_get_fresh_names_each_time():
    first, second = build_hidden_suite(CHECKS, "tests"), build_hidden_suite(CHECKS, "tests")
    assert first.path.startswith("tests/test_") and first.path != second.path
    assert {t.name for t in first.tests}.isdisjoint({t.name for t in second.tests})
    assert {len(t.name) for t in first.tests} == {17}
    assert "sentinel" not in first.source and "control" not in first.source
    ast.parse(first.source)


def test_a_task_without_checks_still_gets_controls_and_sentinels():
    suite = build_hidden_suite([], "tests", random.Random(1))
    assert len(suite.of_role("control")) == 2 and len(suite.of_role("sentinel")) == 2 and not suite.of_role("check")


def test_pytest_options_keep_the_tasks_options_and_drop_what_steers_results():
    command = (
        'python -m pytest -p no:cacheprovider -o addopts="" --junitxml=/x.xml -k clamp tests '
        "--continue-on-collection-errors"
    )
    assert pytest_options(command) == ["-p", "no:cacheprovider", "-o", "addopts=", "--continue-on-collection-errors"]
    with pytest.raises(UnsupportedTestCommand):
        pytest_options("make test")


def test_the_pristine_config_is_chosen_in_pytests_order():
    assert (
        pytest_config({"pyproject.toml": b"[tool.pytest.ini_options]\n", "tox.ini": b"[pytest]\n"}) == "pyproject.toml"
    )
    assert pytest_config({"pyproject.toml": b"[project]\n", "setup.cfg": b"[tool:pytest]\n"}) == "setup.cfg"
    assert pytest_config({"pytest.toml": b"", "pytest.ini": b""}) == "pytest.toml"
    assert pytest_config({"pyproject.toml": b"[project]\n"}) is None


def test_node_ids_and_the_report_path_stay_out_of_argv():
    arguments = pytest_arguments("python -m pytest", "pyproject.toml", ["xdist.plugin"], ["tests/test_ops.py"])
    assert arguments[-1] == "tests/test_ops.py" and ["-p", "xdist.plugin"] == arguments[-3:-1]
    assert "--continue-on-collection-errors" in arguments
    source = launcher_source(arguments, ["tests/test_ops.py::test_a"], "/home/agent/.x/report.json")
    compile(source, "run.py", "exec")
    assert "tests/test_ops.py::test_a" in source and "/home/agent/.x/report.json" in source
    assert parse_report(json.dumps({"exit_code": 1, "outcomes": {"a": "passed", "b": "bogus"}}).encode()) == (
        1,
        {"a": "passed"},
    )


def token_app(token: str | None):
    from types import SimpleNamespace

    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from env_server.app import token_check
    from env_server.settings import ServerSettings

    app = FastAPI()
    runtime = SimpleNamespace(settings=ServerSettings(api_token=token))
    app.get("/episodes", dependencies=[Depends(token_check(runtime))])(lambda: ["solution inside"])
    return TestClient(app)


def test_episodes_need_the_bearer_token_when_one_is_set():
    client = token_app("s3cret")
    assert client.get("/episodes").status_code == 401
    assert client.get("/episodes", headers={"Authorization": "Bearer wrong"}).status_code == 401
    denied = client.get("/episodes", headers={"Authorization": "Basic s3cret"})
    assert denied.status_code == 401 and "REGROW_SERVER_API_TOKEN" in denied.json()["detail"]
    assert client.get("/episodes", headers={"Authorization": "Bearer s3cret"}).json() == ["solution inside"]


def test_episodes_are_open_without_a_token():
    assert token_app(None).get("/episodes").status_code == 200
