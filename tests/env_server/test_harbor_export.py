"""`regrow tasks export --format harbor`: the task directories, and their verifier run here as Harbor runs it (no
engine: the verifier is plain Python over a workspace), against the oracle, the null answer and forgeries; in the
task's own image as root, where the submission runs as another uid; and under Harbor itself."""

import io
import json
import os
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from env_server.harbor.export import export_harbor
from env_server.harbor.inside import wire_standins
from proto import tasks
from regrow.cli import app
from sandbox.archive_extraction import extract_archive
from tests.task_fixture import DELETED_OPS, DEMO_TASK_ID, ORIGINAL_OPS, WRONG_OPS, build_memory_task_store

# Makes pytest report every test passed, whatever the code does: the report is no proof.
FORGED_REPORT = "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
# clamp answers the visible tests' calls from a table, and nothing else.
VISIBLE_TABLE = DELETED_OPS.replace(
    "    raise NotImplementedError\n",
    "    if low > high:\n"
    "        raise ValueError(low)\n"
    "    return {(-5, 0, 10): 0, (50, 0, 10): 10}.get((value, low, high), value)\n",
)
# clamp answers every call from the verifier's own checks file, when it can read it.
READS_THE_CHECKS = DELETED_OPS.replace(
    "    raise NotImplementedError\n",
    "    import ast, json\n"
    "    try:\n"
    "        checks = json.load(open('/tests/checks.json'))\n"
    "    except OSError:\n"
    "        return value\n"
    "    for check in checks:\n"
    "        if ast.literal_eval(check['args']) == (value, low, high):\n"
    "            if check['raises']:\n"
    "                raise ValueError(low)\n"
    "            return ast.literal_eval(check['result'])\n"
    "    return value\n",
)
# A process left behind that keeps writing a full reward where Harbor reads it.
REWRITES_THE_REWARD = (
    "import json, os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    for _ in range(300):\n"
    "        try:\n"
    "            json.dump({'reward': 1.0, 'forged': 1}, open('/logs/verifier/forged', 'w'))\n"
    "            os.replace('/logs/verifier/forged', '/logs/verifier/reward.json')\n"
    "        except OSError:\n"
    "            pass\n"
    "        time.sleep(0.1)\n"
    "    os._exit(0)\n"
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
    shipped = (
        "grader/env_server/grading/checks.py",
        "grader/env_server/grading/verdict.py",
        "grader/proto/evidence.py",
    )
    for path in (
        "instruction.md",
        "solution/solve.sh",
        *(f"tests/{name}" for name in ("test.sh", "grade.py", *shipped)),
    ):
        assert (exported / path).is_file(), path
    assert os.access(exported / "tests" / "test.sh", os.X_OK) and os.access(exported / "solution" / "solve.sh", os.X_OK)
    assert "Implement `clamp" in (exported / "instruction.md").read_text()
    readme = (exported.parent / "README.md").read_text()
    assert readme.startswith("# regrow tasks as Harbor task directories") and "Secret evidence decides" in readme
    assert "Hidden checks" not in readme


def test_the_checks_and_their_outcomes_are_in_the_tests_folder_never_in_the_agents_environment(exported):
    checks = json.loads((exported / "tests" / "checks.json").read_text())
    secret = [check for check in checks if check["test"] is None]

    assert [check["result"] for check in secret] == ["7", "-1.0"]
    environment = list((exported / "environment").rglob("*"))
    for archive in (path for path in environment if path.name.endswith(".tar.gz")):
        with tarfile.open(archive) as tar:
            names = tar.getnames()
            assert not any("checks" in name for name in names), archive
            contents = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())  # type: ignore[union-attr]
        assert b"-2.5, -1.0, 1.0" not in contents and b"(7, 0, 10)" not in contents
    assert {path.name for path in environment} == {"Dockerfile", "workspace.tar.gz", "install.tar.gz"}
    assert "checks" not in (exported / "environment" / "Dockerfile").read_text()


def test_the_stand_ins_carry_what_the_shipped_judging_imports_of_the_wire_models():
    assert wire_standins.HASH_SEED == tasks.HASH_SEED
    for name in ("IoCheck", "DeletedUnit", "TaskRecord", "RewardDetails", "TestOutcome", "UnitCredit", "RewardMode"):
        assert hasattr(wire_standins, name), name


def _workspace(exported: Path, where: Path) -> Path:
    extract_archive(exported / "tests" / "workspace.tar.gz", where)
    return where / "workspace"


def _grade(exported: Path, workspace: Path, tmp_path: Path) -> dict:
    """The verifier's reward.json, run as test.sh runs it (`-I -S`: nothing of regrow but what ships in tests/)."""
    reward = tmp_path / "reward.json"
    env = {
        **os.environ,
        "REGROW_VERIFIER_TESTS": str(exported / "tests"),
        "REGROW_VERIFIER_WORKSPACE": str(workspace),
        "REGROW_VERIFIER_REWARD": str(reward),
        "REGROW_VERIFIER_UID": "",  # as this process: the folders here are not another uid's to read
    }
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(exported / "tests" / "grade.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
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

    null = _grade(exported, untouched, tmp_path)
    graded = _grade(exported, solved, tmp_path)

    assert null["reward"] == 0.0 and null["units_credited"] == 0 and null["secret_passed"] == 0
    assert graded["reward"] == 1.0 and graded["units_credited"] == graded["units_total"] == 1
    assert graded["secret_passed"] == graded["secret_total"] == 2 and graded["basis_checks"] == 1
    assert graded["f2p_passed"] == 3 and graded["p2p_passed"] == 3 and graded["tampered"] == 0
    details = json.loads((tmp_path / "grading.json").read_text())
    assert details["basis"] == "checks" and details["units"][0]["unit"] == "calc/ops.py::clamp"


def test_a_wrong_solution_earns_nothing(exported, tmp_path):
    workspace = _workspace(exported, tmp_path / "wrong")
    (workspace / "calc" / "ops.py").write_text(WRONG_OPS)

    graded = _grade(exported, workspace, tmp_path)

    assert graded["reward"] == 0.0 and graded["units_credited"] == 0


def test_a_forged_report_with_the_stub_earns_nothing(exported, tmp_path):
    workspace = _workspace(exported, tmp_path / "forged")
    # calc/__init__.py makes pytest report every test passed; clamp is still the stub
    (workspace / "calc" / "__init__.py").write_text(FORGED_REPORT)

    graded = _grade(exported, workspace, tmp_path)

    assert graded["f2p_passed"] == 3 and graded["p2p_passed"] == 3
    assert graded["reward"] == 0.0 and graded["secret_passed"] == 0


def test_a_table_of_the_visible_tests_answers_earns_nothing(exported, tmp_path):
    workspace = _workspace(exported, tmp_path / "table")
    (workspace / "calc" / "ops.py").write_text(VISIBLE_TABLE)

    graded = _grade(exported, workspace, tmp_path)

    assert graded["f2p_passed"] == 3 and graded["secret_passed"] == 1 and graded["reward"] == 0.0


def test_a_call_that_reports_twice_on_its_channel_is_a_forgery_worth_nothing(exported, tmp_path):
    workspace = _workspace(exported, tmp_path / "twice")
    _solve(exported, workspace)
    ops = workspace / "calc" / "ops.py"
    # every call also writes a record of its own to each descriptor it holds, its channel among them
    extra = "    import os\n    for fd in range(3, 64):\n        try:\n            os.write(fd, b'{\"i\": 0}\\n')\n"
    extra += "        except OSError:\n            pass\n"
    ops.write_text(ops.read_text().replace('    """Return value limited', extra + '    """Return value limited', 1))

    graded = _grade(exported, workspace, tmp_path)

    assert graded["tampered"] == 1 and graded["reward"] == 0.0


def test_a_task_without_secret_checks_has_no_score(exported, tmp_path):
    checks = json.loads((exported / "tests" / "checks.json").read_text())
    (exported / "tests" / "checks.json").write_text(json.dumps([c for c in checks if c["test"] is not None]))
    solved = _workspace(exported, tmp_path / "oracle")
    _solve(exported, solved)

    graded = _grade(exported, solved, tmp_path)

    assert graded["reward"] == 0.0 and graded["basis_checks"] == 0 and graded["f2p_passed"] == 3
    assert json.loads((tmp_path / "grading.json").read_text())["basis"] == "undefined"


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
    rewards = oracle["verifier_result"]["rewards"]
    assert rewards["reward"] == 1.0 and rewards["units_credited"] == rewards["units_total"] == 1
    assert rewards["secret_passed"] == rewards["secret_total"] == 2 and rewards["basis_checks"] == 1
    assert null["verifier_result"]["rewards"]["reward"] == 0.0


@pytest.fixture(scope="module")
def in_image(docker_backend, demo_task_store, tmp_path_factory):
    """The demo task exported from a store with its image, and its environment built as Harbor builds it."""
    task = tmp_path_factory.mktemp("harbor") / "out"
    export_harbor(demo_task_store, task)
    tag = f"regrow/harbor-verifier-test:{os.getpid()}"
    docker_backend.client.images.build(path=str(task / DEMO_TASK_ID / "environment"), tag=tag, rm=True)
    yield task / DEMO_TASK_ID, tag
    docker_backend.client.images.remove(tag, force=True)


def _tar(files: dict[str, str], folder: Path | None = None) -> bytes:
    """A tar of root's files (and of `folder` as tests/), as Harbor copies them into its verifier's container."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, text in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(text.encode()), 0o644
            tar.addfile(info, io.BytesIO(text.encode()))
        if folder is not None:
            tar.add(folder, arcname="tests", filter=_roots)
    return buffer.getvalue()


def _roots(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _grade_in_image(client, in_image, files: dict[str, str], env: dict[str, str] | None = None) -> tuple[dict, str]:
    """test.sh as root in a fresh container of the task's environment, the submission's files over its workspace;
    (reward.json two seconds after the verifier ended, the uids of the processes left that are not zombies)."""
    task, tag = in_image
    container = client.containers.run(tag, ["sleep", "infinity"], detach=True, user="root", network_mode="none")
    try:
        container.put_archive("/", _tar({f"workspace/{path}": text for path, text in files.items()}, task / "tests"))
        container.exec_run(["mkdir", "-p", "-m", "777", "/logs/verifier"])  # Harbor's mount may be anyone's
        ran = container.exec_run(["bash", "/tests/test.sh"], user="root", environment=env or {})
        assert ran.exit_code == 0, ran.output.decode()[-3000:]
        time.sleep(2)  # what the submission left running has written by now
        reward = json.loads(container.exec_run(["cat", "/logs/verifier/reward.json"]).output)
        alive = container.exec_run(["sh", "-c", "grep -L '^State:.*zombie' /proc/[0-9]*/status | xargs grep -h ^Uid"])
        return reward, alive.output.decode()
    finally:
        container.remove(force=True)


def test_in_the_tasks_image_the_submission_can_neither_read_the_checks_nor_outlive_its_run(docker_backend, in_image):
    client = docker_backend.client
    solved, _ = _grade_in_image(client, in_image, {"calc/ops.py": ORIGINAL_OPS})
    # the control: run as root, beside /tests, a clamp that reads the checks' outcomes earns everything
    beside, _ = _grade_in_image(client, in_image, {"calc/ops.py": READS_THE_CHECKS}, {"REGROW_VERIFIER_UID": ""})
    forged, left = _grade_in_image(
        client, in_image, {"calc/ops.py": READS_THE_CHECKS, "calc/__init__.py": REWRITES_THE_REWARD}
    )

    assert solved["reward"] == 1.0 and solved["secret_passed"] == 2
    assert beside["reward"] == 1.0
    assert forged["reward"] == 0.0 and "forged" not in forged and forged["units_credited"] == 0
    assert "65534" not in left, left


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
