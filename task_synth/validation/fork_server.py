"""A pytest fork server in each validation sandbox (inside/pytest_fork.py): each test run is forked from an interpreter
that has already imported pytest, instead of starting one.

Starting Python and importing pytest is most of a small selection's run (about 0.4 s of 0.45 s for one test file of
toolz), and a candidate runs pytest five to eight times. The workspace changes with every candidate, so the server
imports pytest alone: a child imports the package and its tests itself, from the files as they are now.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from pathlib import Path

from sandbox import Sandbox
from sandbox.layout import WORKSPACE
from task_synth.repository.editable_install import SCRATCH

log = logging.getLogger(__name__)
FORK_SOURCE = Path(__file__).with_name("inside") / "pytest_fork.py"
FORK_PY = f"{SCRATCH}/regrow_pytest_fork.py"
FORK_SOCKET = f"{SCRATCH}/pytest.sock"
FORK_LOG = f"{SCRATCH}/pytest-fork.log"
PLAIN_PYTEST = "python -m pytest"
_serving: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def start_fork_server(sb: Sandbox, env: Mapping[str, str]) -> None:
    """Start the server in `sb`, in the background, with the start-up environment `env` of the runs it will serve;
    runs go through it once it listens (`python -m pytest` before), and whenever their environment is another."""
    sb.write_file(FORK_PY, FORK_SOURCE.read_text())
    # Waits until the server listens (it imports pytest first, under a second), so that every run goes through it.
    script = (
        f"setsid python {FORK_PY} serve {FORK_SOCKET} > {FORK_LOG} 2>&1 < /dev/null & "
        f"for _ in $(seq 200); do [ -S {FORK_SOCKET} ] && exit 0; sleep 0.05; done; cat {FORK_LOG}; exit 1"
    )
    result = sb.exec(["sh", "-c", script], timeout=30, cwd=WORKSPACE, env=env)
    if result.exit_code != 0:
        output = (result.stdout + result.stderr)[-300:]
        log.warning("the pytest fork server did not start (%s): each run starts its own pytest", output)
        return
    _serving.add(sb)


def through_fork_server(sb: Sandbox, test_command: str) -> str:
    """`test_command` as run through `sb`'s server, where it has one and the command is a plain `python -m pytest`."""
    if sb in _serving and (test_command == PLAIN_PYTEST or test_command.startswith(PLAIN_PYTEST + " ")):
        return f"python {FORK_PY} {FORK_SOCKET}{test_command.removeprefix(PLAIN_PYTEST)}"
    return test_command


def has_fork_server(sb: Sandbox) -> bool:
    return sb in _serving


def use_fork_server(sb: Sandbox, on: bool) -> None:
    """Send `sb`'s runs through its started server (on) or to a fresh pytest each (off), as a benchmark compares."""
    if on:
        _serving.add(sb)
    else:
        _serving.discard(sb)
