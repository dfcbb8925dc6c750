"""The grader's pure logic, without an engine: path policy, change sets and the pytest command of a graded run."""

import io
import tarfile

import pytest

from env_server.grading.change_set import ChangeSet, SubmissionTooLarge, archive_of, compare, differs_from, read_tree
from env_server.grading.path_policy import PathPolicy
from env_server.grading.pytest_command import UnsupportedTestCommand, pytest_arguments, pytest_config, pytest_options

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


def test_the_grader_owns_the_pristine_tests_and_seals_their_folders():
    files = {"tests/test_ops.py": b"def test(): ...\n", "calc/ops.py": b"x = 1\n", "opt/.g/launcher.py": b""}
    archive = archive_of(
        files, (), ("opt",), root_owned={"tests/test_ops.py", "opt/.g", "opt/.g/launcher.py"}, sealed_folders={"tests"}
    )
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {member.name: member for member in tar}
    assert (members["tests"].uid, members["tests"].mode) == (0, 0o1777)  # new files yes, replacing root's no
    assert (members["tests/test_ops.py"].uid, members["tests/test_ops.py"].mode) == (0, 0o644)
    assert (members["opt/.g"].uid, members["opt/.g"].mode) == (0, 0o755)
    assert members["opt/.g/launcher.py"].uid == 0 and members["calc/ops.py"].uid == 1000


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


def test_node_ids_stay_out_of_argv_and_the_images_plugins_are_named():
    arguments = pytest_arguments("python -m pytest", "pyproject.toml", ["xdist.plugin"], ["tests/test_ops.py"])
    assert arguments[-1] == "tests/test_ops.py" and ["-p", "xdist.plugin"] == arguments[-3:-1]
    assert "--continue-on-collection-errors" in arguments
    assert not any("::" in argument for argument in arguments)


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
