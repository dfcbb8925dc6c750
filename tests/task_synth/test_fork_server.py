"""The pytest fork server (task_synth/validation/inside/pytest_fork.py): a run through it is the run a fresh
`python -m pytest` makes, nothing one run does reaches the next, a changed workspace is seen, a run under another
start-up environment falls back to a fresh pytest, and a killed client takes its run with it. No Docker: the server and
its clients run here, as they run in a sandbox."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from task_synth.settings import SynthSettings
from task_synth.validation.fork_server import FORK_LOG, FORK_SOURCE
from task_synth.validation.repo_context import prepare_repo
from task_synth.validation.suite_runs import run_tests

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"

LIBRARY = "def double(x):\n    return 2 * x\n"
TESTS = """\
import os
import sys

import _pytest
import lib


def test_double():
    assert lib.double(2) == 4


def test_nothing_leaks_from_an_earlier_run():
    assert not hasattr(_pytest, "regrow_leak")  # pytest's own module, imported once by the server
    _pytest.regrow_leak = True
    assert "lib" in sys.modules


def test_where_it_ran():
    with open(os.environ["WHERE_OUT"], "w") as out:
        out.write(open(f"/proc/{os.getppid()}/cmdline").read().replace("\\0", " "))
        out.write("\\n" + str(hash("regrow")))
"""


@pytest.fixture
def served(tmp_path: Path):
    (tmp_path / "lib.py").write_text(LIBRARY)
    (tmp_path / "test_lib.py").write_text(TESTS)
    socket_path = str(tmp_path / "fork.sock")
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTEST_ADDOPTS": "", "WHERE_OUT": str(tmp_path / "where.txt")}
    env["PYTHONPATH"] = str(tmp_path / "late_plugins")  # made only after the server starts
    server = subprocess.Popen(
        [sys.executable, str(FORK_SOURCE), "serve", socket_path], cwd=tmp_path, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 20
    while not os.path.exists(socket_path):
        assert server.poll() is None and time.monotonic() < deadline, "the fork server did not start"
        time.sleep(0.05)

    def run(*arguments: str, **changes: str) -> subprocess.CompletedProcess:
        command = [sys.executable, str(FORK_SOURCE), socket_path, "-q", "-p", "no:cacheprovider", *arguments]
        return subprocess.run(command, cwd=tmp_path, env={**env, **changes}, capture_output=True, text=True, timeout=60)

    yield run, tmp_path
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()


def test_a_run_through_the_server_is_forked_from_it_and_reports_as_pytest_does(served):
    run, root = served
    result = run("test_lib.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout and "console_main" not in result.stderr, result.stderr
    parent, seed_hash = (root / "where.txt").read_text().splitlines()
    assert "pytest_fork.py serve" in parent  # the test's process is a child of the server, not of a fresh interpreter
    fresh = subprocess.run(
        [sys.executable, "-c", "print(hash('regrow'))"], env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True
    )
    assert seed_hash == fresh.stdout.decode().strip()  # the server's hash seed is the run's


def test_nothing_one_run_does_reaches_the_next(served):
    run, _ = served
    first, second = run("test_lib.py"), run("test_lib.py")
    assert (first.returncode, second.returncode) == (0, 0), second.stdout


def test_a_changed_workspace_is_seen_and_a_failure_is_exit_status_1(served):
    run, root = served
    assert run("test_lib.py").returncode == 0
    (root / "lib.py").write_text("def double(x):\n    raise NotImplementedError\n")
    result = run("test_lib.py")
    assert result.returncode == 1 and "1 failed, 2 passed" in result.stdout
    assert run("no_such_file.py").returncode == 4  # pytest's usage error, as a fresh run exits


def test_another_start_up_environment_runs_a_fresh_pytest(served):
    run, root = served
    assert run("test_lib.py", PYTHONHASHSEED="7").returncode == 0
    parent, seed_hash = (root / "where.txt").read_text().splitlines()
    assert "pytest_fork.py serve" not in parent
    fresh = subprocess.run(
        [sys.executable, "-c", "print(hash('regrow'))"], env={**os.environ, "PYTHONHASHSEED": "7"}, capture_output=True
    )
    assert seed_hash == fresh.stdout.decode().strip()


def test_a_killed_client_takes_its_run_with_it(served):
    run, root = served
    (root / "test_slow.py").write_text(
        "import os, time\n\ndef test_slow():\n    open('pid.txt', 'w').write(str(os.getpid()))\n    time.sleep(60)\n"
    )
    socket_path = str(root / "fork.sock")
    client = subprocess.Popen(
        [sys.executable, str(FORK_SOURCE), socket_path, "-q", "-p", "no:cacheprovider", "test_slow.py"],
        cwd=root,
        env={**os.environ, "PYTHONHASHSEED": "0", "PYTEST_ADDOPTS": "", "WHERE_OUT": str(root / "where.txt")},
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not (root / "pid.txt").exists() or not (root / "pid.txt").read_text():
        assert time.monotonic() < deadline, "the slow test never started"
        time.sleep(0.05)
    child = int((root / "pid.txt").read_text())
    client.send_signal(signal.SIGTERM)  # what a command's timeout does to it
    client.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _alive(child):
        assert time.monotonic() < deadline, "the run outlived its client"
        time.sleep(0.05)
    assert run("test_lib.py").returncode == 0  # the server goes on


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_folder_on_the_path_made_after_the_server_started_is_searched(served):
    """The plugins folder on PYTHONPATH is written after the server starts: its import cache must not hide it."""
    run, root = served
    plugins = root / "late_plugins"
    plugins.mkdir()
    (plugins / "late_plugin.py").write_text("def pytest_configure(config):\n    print('late plugin loaded')\n")
    result = run("test_lib.py", "-p", "late_plugin")
    assert result.returncode == 0 and "late plugin loaded" in result.stdout, result.stdout + result.stderr
    assert "pytest_fork.py serve" in (root / "where.txt").read_text()


@pytest.mark.docker
def test_a_validation_sandbox_runs_its_tests_through_its_server_with_the_same_outcomes(
    docker_backend, base_image, tmp_path
):
    """minilib's suite in a pooled validation sandbox: through the server and with a fresh pytest, the same outcome
    for every test, and the server's log names the run it forked."""
    settings = SynthSettings(max_tasks=1, seed=0)
    context = prepare_repo(str(MINILIB), settings, docker_backend, tmp_path, [])
    with context.sandbox() as sb:
        served = run_tests(sb, settings.test_command, None, 120)
        log = sb.exec(["cat", FORK_LOG]).stdout
        assert "run " in log, log
        plain = run_tests(sb, settings.test_command.replace("python -m pytest", "python -m  pytest"), None, 120)
    assert served.outcomes == plain.outcomes and len(served.outcomes) == len(context.baseline.stable)
    assert all(served.outcomes.values())
