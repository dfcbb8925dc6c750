"""The hardened test run of a grading: how pytest is started, what it is told, and how its results come back.

pytest starts from a launcher script outside /workspace, with a safe sys.path, plugin autoload off and no cache. The
node ids and the report's location live in the launcher, not in sys.argv, and the report is written after pytest
returns and after every process the tests started has been killed, so nothing the run started can rewrite it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Literal

from proto.tasks import HASH_SEED

Outcome = Literal["passed", "failed", "error", "skipped", "missing"]
PYTEST_PREFIXES = (("python", "-m", "pytest"), ("python3", "-m", "pytest"), ("pytest",))
# Options a task's test command may not carry into a graded run: they choose where results go or what is collected.
_DROPPED_OPTIONS = frozenset(
    {
        "--junitxml",
        "--junit-xml",
        "--resultlog",
        "--report-log",
        "--lf",
        "--last-failed",
        "--ff",
        "--failed-first",
        "--sw",
        "--stepwise",
        "-k",
        "-m",
        "--deselect",
        "--ignore",
        "--ignore-glob",
        "-c",
        "--config-file",
        "--rootdir",
        "-x",
        "--exitfirst",
        "--maxfail",
    }
)
_VALUE_OPTIONS = frozenset(
    {
        "-o",
        "--override-ini",
        "-p",
        "-c",
        "--config-file",
        "-W",
        "--pythonwarnings",
        "--tb",
        "-r",
        "--rootdir",
        "--confcutdir",
        "--basetemp",
        "--import-mode",
        "--timeout",
        "--maxfail",
        "--durations",
        "--log-level",
        "-k",
        "-m",
        "--deselect",
        "--ignore",
        "--ignore-glob",
        "--junitxml",
        "--junit-xml",
        "--resultlog",
        "--report-log",
    }
)
# Config files pytest reads, in its order of precedence; the ones that need a pytest section name it.
PYTEST_CONFIGS = (
    ("pytest.toml", None),
    (".pytest.toml", None),
    ("pytest.ini", None),
    (".pytest.ini", None),
    ("pyproject.toml", "[tool.pytest"),
    ("tox.ini", "[pytest]"),
    ("setup.cfg", "[tool:pytest]"),
)
GRADING_ENV = {
    "PYTHONSAFEPATH": "1",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
    "PYTHONHASHSEED": str(HASH_SEED),  # a task's own record.hash_seed overrides it
}

_LAUNCHER = '''import json
from io import open as _read
from json import dumps as _dumps
from os import O_CREAT, O_EXCL, O_WRONLY
from os import _exit, getpid, kill, listdir, unlink, write
from os import open as _open
from signal import SIGKILL, SIGSTOP

import pytest

WANTED = set(json.loads({wanted!r}))


def _started(pid):
    with _read(f"/proc/{{pid}}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[19])


def _sweep():
    """Stop, then kill, every process started after this one: whatever the tests left running."""
    me = getpid()
    since, stopped = _started(me), set()
    for _ in range(1000):
        found = set()
        for name in listdir("/proc"):
            try:
                if name.isdigit() and int(name) != me and int(name) not in stopped and _started(name) >= since:
                    found.add(int(name))
            except (OSError, ValueError, IndexError):
                pass
        if not found:
            break
        for pid in found:
            try:
                kill(pid, SIGSTOP)
            except OSError:
                pass
        stopped |= found
    for pid in stopped:
        try:
            kill(pid, SIGKILL)
        except OSError:
            pass


class Recorder:
    def __init__(self):
        self.outcomes = {{}}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        kept = [item for item in items if item.nodeid in WANTED]
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in WANTED])
        items[:] = kept

    def pytest_runtest_logreport(self, report):
        if report.nodeid not in WANTED:
            return
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped or hasattr(report, "wasxfail"):
            outcome = "skipped"
        else:
            outcome = "passed"
        if self.outcomes.get(report.nodeid, "passed") == "passed":
            self.outcomes[report.nodeid] = outcome


recorder = Recorder()
code = pytest.main(json.loads({arguments!r}), plugins=[recorder])
# Bound before any test code ran. Whatever the tests started dies first, so nothing can write the report after us;
# the file is made anew (not opened earlier), and _exit skips atexit handlers.
text = _dumps({{"exit_code": int(code), "outcomes": recorder.outcomes}}).encode()
_sweep()
try:
    unlink({report!r})
except FileNotFoundError:
    pass
handle = _open({report!r}, O_WRONLY | O_CREAT | O_EXCL, 0o600)
write(handle, text)
_exit(0)
'''


class UnsupportedTestCommand(ValueError):
    """A task's test command is not a pytest command the grader can harden."""


def pytest_options(test_command: str) -> list[str]:
    """The options of a task's `python -m pytest ...` command, without those that steer results or selection."""
    words = shlex.split(test_command)
    for prefix in PYTEST_PREFIXES:
        if tuple(words[: len(prefix)]) == prefix:
            break
    else:
        raise UnsupportedTestCommand(
            f"test command {test_command!r} is not `python -m pytest ...`; re-synthesize the task"
        )
    options, rest = [], words[len(prefix) :]
    index = 0
    while index < len(rest):
        word = rest[index]
        name = word.split("=", 1)[0]
        takes_value = name in _VALUE_OPTIONS and "=" not in word
        if name in _DROPPED_OPTIONS or not word.startswith("-"):
            index += 2 if takes_value else 1  # a path or node id of the original command: the grader chooses what runs
            continue
        options += rest[index : index + 2] if takes_value else [word]
        index += 2 if takes_value else 1
    return options


def pytest_config(root_files: dict[str, bytes]) -> str | None:
    """The root config file pytest would read, from the pristine root files given (name -> content)."""
    for name, section in PYTEST_CONFIGS:
        content = root_files.get(name)
        if content is not None and (section is None or section.encode() in content):
            return name
    return None


def pytest_arguments(test_command: str, config: str | None, plugins: Sequence[str], paths: Sequence[str]) -> list[str]:
    """pytest's argument list for a graded run in /workspace."""
    # A test file that no longer imports must not stop the others, the hidden suite's controls among them.
    arguments = [
        *pytest_options(test_command),
        "-p",
        "no:cacheprovider",
        "--rootdir=/workspace",
        "-q",
        "--continue-on-collection-errors",
    ]
    if config:
        arguments += ["-c", f"/workspace/{config}"]
    for plugin in plugins:
        arguments += ["-p", plugin]
    return [*arguments, *sorted(set(paths))]


def launcher_source(arguments: list[str], wanted: list[str], report_path: str) -> str:
    """The launcher script: runs pytest in-process on `arguments`, keeps `wanted` node ids, writes the report."""
    return _LAUNCHER.format(wanted=json.dumps(sorted(set(wanted))), arguments=json.dumps(arguments), report=report_path)


def parse_report(data: bytes) -> tuple[int, dict[str, Outcome]]:
    """(pytest's exit code, outcome by node id) from a launcher's report."""
    report = json.loads(data)
    outcomes = {
        str(nodeid): outcome
        for nodeid, outcome in report.get("outcomes", {}).items()
        if outcome in ("passed", "failed", "error", "skipped")
    }
    return int(report.get("exit_code", -1)), outcomes
