"""What a graded pytest run is told: the task's options without those that steer results or selection, the pristine
config, the image's plugins named one by one (autoload is off), and the environment it runs in.
"""

from __future__ import annotations

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
