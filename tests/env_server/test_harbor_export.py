"""`regrow tasks export --format harbor`: the task directories, and their verifier run here as Harbor runs it (no
engine: the verifier is plain Python over a workspace), against the oracle, the null answer and forgeries."""

import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from regrow.cli import app
from tests.task_fixture import DEMO_TASK_ID, build_memory_task_store

CLAMP = "def clamp(value, low, high):\n"
# Rewrites the verifier's outcome file when the test process exits: every test passed, whatever the code did.
FORGE_AT_EXIT = (
    "\nimport atexit, json, os\n"
    "def _forge():\n"
    "    path = os.environ.get('REGROW_OUTCOMES')\n"
    "    if path:\n"
    "        names = ['test_clamp_below', 'test_clamp_above', 'test_clamp_rejects_empty_range', 'test_add',\n"
    "                 'test_sub', 'test_mul']\n"
    "        json.dump({f'tests/test_ops.py::{n}': 'passed' for n in names}, open(path, 'w'))\n"
    "atexit.register(_forge)\n"
)


@pytest.fixture
def exported(tmp_path) -> Path:
    store = build_memory_task_store(tmp_path / "store")
    result = CliRunner().invoke(
        app, ["tasks", "export", "--store", str(store), "--out", str(tmp_path / "harbor"), "--format", "harbor"]
    )
    assert result.exit_code == 0, result.output
    return tmp_path / "harbor" / DEMO_TASK_ID


def test_each_task_is_a_harbor_directory_whose_verifier_grades_apart_from_the_agent(exported):
    config = tomllib.loads((exported / "task.toml").read_text())

    assert config["task"]["name"] == f"regrow/{DEMO_TASK_ID}"
    assert config["verifier"]["environment_mode"] == "separate" and config["artifacts"] == ["/workspace"]
    assert (exported / "environment" / "Dockerfile").read_text().startswith("FROM ")
    for path in ("instruction.md", "solution/solve.sh", "tests/test.sh", "tests/grade.py", "tests/path_policy.py"):
        assert (exported / path).is_file(), path
    assert os.access(exported / "tests" / "test.sh", os.X_OK) and os.access(exported / "solution" / "solve.sh", os.X_OK)
    assert "Implement `clamp" in (exported / "instruction.md").read_text()
    assert (exported.parent / "README.md").read_text().startswith("# regrow tasks as Harbor task directories")


def _workspace(exported: Path, where: Path) -> Path:
    with tarfile.open(exported / "tests" / "workspace.tar.gz") as archive:
        archive.extractall(where, filter="tar")
    return where / "workspace"


def _grade(exported: Path, workspace: Path, tmp_path: Path) -> dict:
    reward = tmp_path / "reward.json"
    env = {
        **os.environ,
        "REGROW_VERIFIER_TESTS": str(exported / "tests"),
        "REGROW_VERIFIER_WORKSPACE": str(workspace),
        "REGROW_VERIFIER_REWARD": str(reward),
    }
    task = json.loads((exported / "tests" / "task.json").read_text())
    if task["test_command"].startswith("python "):  # this venv's, which has pytest
        task["test_command"] = sys.executable + task["test_command"].removeprefix("python")
    (exported / "tests" / "task.json").write_text(json.dumps(task))
    done = subprocess.run(
        [sys.executable, str(exported / "tests" / "grade.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(reward.read_text())


def _solve(exported: Path, workspace: Path) -> None:
    patch = exported / "solution" / "solution.patch"
    subprocess.run(["git", "apply", str(patch)], cwd=workspace, check=True)


def test_the_oracle_earns_one_and_the_untouched_workspace_nothing(exported, tmp_path):
    untouched = _workspace(exported, tmp_path / "null")
    solved = _workspace(exported, tmp_path / "oracle")
    _solve(exported, solved)

    assert _grade(exported, untouched, tmp_path)["reward"] == 0.0
    graded = _grade(exported, solved, tmp_path)
    assert graded["reward"] == 1.0 and graded["f2p_credited"] == graded["f2p_total"] == 3


def test_a_conftest_that_passes_every_test_is_put_back_and_earns_nothing(exported, tmp_path):
    workspace = _workspace(exported, tmp_path / "forged")
    (workspace / "conftest.py").write_text(
        "import pytest\n\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    report = outcome.get_result()\n"
        "    report.outcome = 'passed'\n"
    )
    (workspace / "tests" / "test_ops.py").write_text("def test_clamp_below():\n    pass\n")  # and the tests gutted

    graded = _grade(exported, workspace, tmp_path)

    assert graded["reward"] == 0.0 and graded["reverted_paths"] == 2


def test_a_forgery_in_another_module_survives_the_counterfactual_and_earns_nothing(exported, tmp_path):
    workspace = _workspace(exported, tmp_path / "forged")
    # calc/__init__.py marks every test passed, whatever clamp does: the counterfactual's stub passes too
    (workspace / "calc" / "__init__.py").write_text((workspace / "calc" / "__init__.py").read_text() + FORGE_AT_EXIT)

    graded = _grade(exported, workspace, tmp_path)

    assert graded["f2p_passed"] == 3 and graded["f2p_credited"] == 0 and graded["reward"] == 0.0


def test_a_forgery_beside_the_unit_in_its_own_file_is_kept_in_the_counterfactual(exported, tmp_path):
    workspace = _workspace(exported, tmp_path / "forged")
    ops = workspace / "calc" / "ops.py"
    # the module-level forgery stays when only clamp goes back to its stub: its passes survive and earn nothing
    ops.write_text(ops.read_text() + FORGE_AT_EXIT)
    assert CLAMP in ops.read_text()

    graded = _grade(exported, workspace, tmp_path)

    assert graded["f2p_passed"] == 3 and graded["reward"] == 0.0


def test_an_export_over_an_existing_folder_is_refused_and_leaves_it_as_it_was(tmp_path):
    store = build_memory_task_store(tmp_path / "store")
    out = tmp_path / "harbor"
    out.mkdir()
    (out / "mine.txt").write_text("keep")

    result = CliRunner().invoke(
        app, ["tasks", "export", "--store", str(store), "--out", str(out), "--format", "harbor"]
    )

    assert result.exit_code == 1 and "--force" in result.output
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    unknown = CliRunner().invoke(app, ["tasks", "export", "--store", str(store), "--out", str(out), "--format", "x"])
    assert unknown.exit_code == 1 and "harbor" in unknown.output


@pytest.mark.docker
def test_harbor_itself_runs_the_export_offline_the_oracle_earns_one_and_nop_nothing(
    docker_backend, base_image, tmp_path
):
    from tests.harbor_runner import harbor_trial
    from tests.task_fixture import build_demo_task_store

    store = build_demo_task_store(docker_backend, base_image, tmp_path / "store")
    out = tmp_path / "harbor"
    result = CliRunner().invoke(
        app, ["tasks", "export", "--store", str(store), "--out", str(out), "--format", "harbor"]
    )
    assert result.exit_code == 0, result.output

    oracle = harbor_trial(docker_backend.client, out / DEMO_TASK_ID, "oracle")
    null = harbor_trial(docker_backend.client, out / DEMO_TASK_ID, "nop")

    assert oracle["exception_info"] is None and null["exception_info"] is None
    assert oracle["verifier_result"]["rewards"]["reward"] == 1.0
    assert null["verifier_result"]["rewards"]["reward"] == 0.0


def test_a_tests_folder_swapped_for_a_link_to_other_tests_is_put_back(exported, tmp_path):
    workspace = _workspace(exported, tmp_path / "forged")
    fake = tmp_path / "fake_tests"
    fake.mkdir()
    for name in ("test_clamp_below", "test_clamp_above", "test_clamp_rejects_empty_range"):
        (fake / "test_ops.py").open("a").write(f"def {name}():\n    pass\n")
    for name in ("test_add", "test_sub", "test_mul"):
        (fake / "test_ops.py").open("a").write(f"def {name}():\n    pass\n")
    original_tests = workspace / "tests"
    subprocess.run(["rm", "-rf", str(original_tests)], check=True)
    original_tests.symlink_to(fake, target_is_directory=True)

    graded = _grade(exported, workspace, tmp_path)

    assert graded["reward"] == 0.0 and not (workspace / "tests").is_symlink()
    assert "def test_clamp_below():\n    pass" in (fake / "test_ops.py").read_text()  # nothing written through it
