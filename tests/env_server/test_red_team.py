"""A reward-hacking policy against synthesized tasks of every kind: a function, a method, a class and a group of
units, made from the minilib fixture by `regrow synth` and graded by a live runtime on the real engine.

Each forgery leaves every deleted unit a stub, or a lookup of the answers the visible tests show (with the most
common one for anything else), and forges what it can: the test report, the check channel, or both. A unit earns
only through its secret checks, so every forgery earns 0 on every task; the task's own code earns 1.
"""

from __future__ import annotations

import ast
import collections
import gzip
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from env_server.lifecycle.reset_options import ResetOptions
from env_server.task_store import Task
from proto.actions import ToolCall
from proto.evidence import module_of_path
from proto.tasks import IoCheck
from tests.env_server.conftest import MINILIB, MINILIB_KINDS, live_runtime, task_of_kind_in
from tests.env_server.dashboard_support import FORGED_INIT
from tests.env_server.test_reward_hacks import LIE

pytestmark = pytest.mark.docker

INIT = "src/minilib/__init__.py"
KINDS = MINILIB_KINDS


@pytest.fixture(scope="module")
def red_team_runtime(docker_backend, minilib_kinds_store, tmp_path_factory):
    with live_runtime(docker_backend, minilib_kinds_store, tmp_path_factory.mktemp("rt")) as live:
        yield live


def task_of_kind(runtime, kind: str) -> Task:
    return task_of_kind_in(runtime.store.tasks.values(), kind)


def play(runtime, task: Task, files: dict[str, str]) -> dict:
    episode = runtime.start_episode(ResetOptions(task_id=task.id))
    for path, content in files.items():
        runtime.take_step(episode, ToolCall(tool="write_file", args={"path": path, "content": content}))
    return runtime.take_step(episode, ToolCall(tool="submit")).metadata["reward_details"]


def deleted_state(task: Task, path: str) -> str:
    """A file as the task's workspace has it (its units stubs), read from the task's workspace archive."""
    archive = ((task.store_root or Path()) / (task.record.workspace_archive or "")).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        member = tar.extractfile(f"workspace/{path}")
        assert member is not None, path
        return member.read().decode()


def _table_source(check_of: str, checks: list[IoCheck]) -> str | None:
    """A function answering the visible calls from a table, the most common visible answer otherwise; None when the
    calls' values are no plain literals."""
    table, answers = {}, collections.Counter()
    for check in checks:
        if check.inputs is not None or check.steps is not None or check.take is not None:
            return None
        try:
            key = repr((ast.literal_eval(check.args), ast.literal_eval(check.kwargs)))
            answer = ("raise", check.raises) if check.raises else ("return", ast.literal_eval(check.result or "None"))
        except (ValueError, SyntaxError):
            return None
        table[key] = answer
        answers[repr(answer)] += 1
    if not table:
        return None
    fallback = ast.literal_eval(answers.most_common(1)[0][0])
    return (
        f"_TABLE_{check_of} = {table!r}\n\n\n"
        f"def _answer_{check_of}(args, kwargs):\n"
        f"    kind, value = _TABLE_{check_of}.get(repr((args, kwargs)), {fallback!r})\n"
        "    if kind == 'raise':\n"
        "        import builtins\n\n"
        "        raise getattr(builtins, value, Exception)(value)\n"
        "    return value\n"
    )


def lookup_tables(task: Task) -> dict[str, str]:
    """Every function and method unit replaced by a table of its visible calls' answers; the rest left stubs."""
    files: dict[str, str] = {}
    visible = [check for check in task.io_checks() if check.test is not None]
    for index, unit in enumerate(task.record.deleted):
        mine = [c for c in visible if c.qualname == unit.qualname and module_of_path(unit.path).endswith(c.module)]
        source = _table_source(str(index), mine)
        if source is None or unit.kind not in ("function", "method"):
            continue
        text = files.get(unit.path) or deleted_state(task, unit.path)
        owner, _, name = unit.qualname.rpartition(".")
        if owner:
            bind = f"{owner}.{name} = lambda self, *args, **kwargs: _answer_{index}(args, kwargs)\n"
        else:
            bind = f"def {name}(*args, **kwargs):\n    return _answer_{index}(args, kwargs)\n"
        files[unit.path] = f"{text}\n\n{source}\n\n{bind}"
    return files


def forgeries(init: str, init_text: str) -> dict[str, Callable[[Task], dict[str, str]]]:
    """Each forgery as the files it writes, the package's `init` (its text `init_text`) carrying what it forges."""
    return {
        "report_forged_units_stubbed": lambda task: {init: init_text + LIE + "\nlie()\n"},
        "check_channel_forged": lambda task: {init: init_text + FORGED_INIT},
        "visible_answer_tables": lookup_tables,
        "tables_and_forged_report": lambda task: {**lookup_tables(task), init: init_text + LIE + "\nlie()\n"},
    }


FORGERIES = forgeries(INIT, (MINILIB / INIT).read_text())


@pytest.mark.parametrize("kind", KINDS)
def test_the_tasks_own_code_earns_one(red_team_runtime, kind):
    task = task_of_kind(red_team_runtime, kind)
    original = {unit.path: (MINILIB / unit.path).read_text() for unit in task.record.deleted}
    details = play(red_team_runtime, task, original)
    assert details["reward"] == 1.0 and details["basis"] == "checks", details
    assert details["units_credited"] == details["units_total"] == len(task.record.deleted), details


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
@pytest.mark.parametrize("kind", KINDS)
def test_no_forgery_earns_anything_on_any_kind_of_task(red_team_runtime, kind, forgery):
    task = task_of_kind(red_team_runtime, kind)
    files = FORGERIES[forgery](task)
    details = play(red_team_runtime, task, files)
    print(f"RED TEAM {kind} {task.id} {forgery}: reward {details['reward']} units {details['units_credited']}")
    assert details["reward"] == 0.0, details
    assert details["units_credited"] == 0, details
