"""Whole-class tasks synthesized from the minilib fixture and graded by a live runtime on the real engine: their
programs decide the reward, so an honest rewrite with its own layout earns 1, a wrong class and a lying test process
earn nothing, and every check of a class's twin fails on the original."""

from __future__ import annotations

import random

import pytest

from env_server.grading.checks import judge
from env_server.lifecycle.reset_options import ResetOptions
from env_server.task_store import Task, TaskStore
from proto.actions import ToolCall
from proto.call_replay import replay_program
from task_synth.store.twins import twin_of
from tests.env_server.conftest import MINILIB, live_runtime, task_of_kind_in
from tests.env_server.test_reward_hacks import LIE

pytestmark = pytest.mark.docker

CONTAINERS = "src/minilib/containers.py"
ORIGINAL = (MINILIB / CONTAINERS).read_text()
HEAD, _, REST = ORIGINAL.partition("class BoundedStack:")
LRU = "class LRUCache:" + REST.partition("class LRUCache:")[2]

# An honest BoundedStack with a layout of its own: a deque under another name, the capacity a read-only property.
STACK_REWRITE = '''
from collections import deque


class BoundedStack:
    """A LIFO stack that refuses to grow past `capacity`."""

    def __init__(self, capacity):
        if not capacity >= 1:
            raise ValueError(f"capacity {capacity} is below 1")
        self._limit, self.data = capacity, deque()

    @property
    def capacity(self):
        return self._limit

    def push(self, item):
        if len(self) == self._limit:
            raise OverflowError("full")
        self.data.append(item)
        return len(self.data)

    def pop(self):
        if not self.data:
            raise IndexError("empty")
        return self.data.pop()

    def peek(self):
        if not self.data:
            raise IndexError("empty")
        return self.data[-1]

    def __len__(self):
        return len(self.data)


'''
# Wrong: `peek` looks at the bottom of the stack.
STACK_WRONG = STACK_REWRITE.replace("return self.data[-1]", "return self.data[0]")
STACK_STUB = "class BoundedStack:\n    pass\n\n\n"


@pytest.fixture(scope="module")
def class_task(minilib_kinds_store) -> Task:
    task = task_of_kind_in(TaskStore(minilib_kinds_store).tasks.values(), "class")
    assert task.record.deleted[0].qualname == "BoundedStack", task.record.deleted
    return task


@pytest.fixture(scope="module")
def class_runtime(docker_backend, minilib_kinds_store, tmp_path_factory):
    with live_runtime(docker_backend, minilib_kinds_store, tmp_path_factory.mktemp("rt")) as live:
        yield live


def _play(runtime, files: dict[str, str]) -> dict:
    episode = runtime.start_episode(ResetOptions(task_id=task_of_kind_in(runtime.store.tasks.values(), "class").id))
    for path, content in files.items():
        runtime.take_step(episode, ToolCall(tool="write_file", args={"path": path, "content": content}))
    return runtime.take_step(episode, ToolCall(tool="submit")).metadata["reward_details"]


def test_the_class_task_is_judged_by_its_programs(class_task):
    task = class_task
    checks = task.io_checks()
    assert checks and all(check.steps is not None and check.qualname == "BoundedStack" for check in checks)
    assert any(check.test is None for check in checks), "no unseen program"
    assert task.record.stats.mutant_kill_rate is not None and task.record.stats.mutant_kill_rate >= 0.9


@pytest.mark.parametrize(
    ("name", "stack", "reward"),
    [("original", ORIGINAL, 1.0), ("own layout", HEAD + STACK_REWRITE + LRU, 1.0)],
)
def test_honest_classes_earn_one(class_runtime, name, stack, reward):
    details = _play(class_runtime, {CONTAINERS: stack})
    assert details["reward"] == reward and details["basis"] == "checks", (name, details)
    assert details["tampered"] is False, details


@pytest.fixture(scope="module")
def wrong(class_runtime) -> dict:
    """The reward details of the wrong stack alone."""
    return _play(class_runtime, {CONTAINERS: HEAD + STACK_WRONG + LRU})


def test_a_wrong_class_earns_less_and_a_lying_test_process_adds_nothing(class_runtime, wrong):
    assert 0.0 <= wrong["reward"] < 1.0, wrong
    init = (MINILIB / "src/minilib/__init__.py").read_text() + LIE + "\nlie()\n"
    lying = _play(class_runtime, {CONTAINERS: HEAD + STACK_WRONG + LRU, "src/minilib/__init__.py": init})
    assert lying["reward"] <= wrong["reward"], lying
    stub = _play(class_runtime, {CONTAINERS: HEAD + STACK_STUB + LRU, "src/minilib/__init__.py": init})
    assert stub["reward"] == 0.0, stub


# Forgeries of a class task, each beside the wrong stack: none may earn more than the wrong stack earns alone.
INIT = (MINILIB / "src/minilib/__init__.py").read_text()
# Lies only where the class is no stub, so that the counterfactual run (the stub put back) looks honest.
SELECTIVE_LIE = (
    LIE
    + """
def _not_stub():
    from minilib import containers
    return hasattr(containers.BoundedStack, "push")


if _not_stub():
    lie()
"""
)
# Outside pytest (the check child), writes a passing-looking outcome for every check index to every open descriptor.
FORGED_OUTCOMES = """
import json as _json
import os as _os
import sys as _sys

if "pytest" not in _sys.modules:
    for _fd in range(3, 64):
        for _i in range(64):
            _line = {"i": _i, "returned": "(('returned', None), ('returned', 1), ('returned', 1), )", "state": "()"}
            try:
                _os.write(_fd, (_json.dumps(_line) + "\n").encode())
            except OSError:
                break
"""
# Every method answers with an object equal to anything: the visible asserts pass.
ALWAYS_EQUAL = """

class _Any:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = None


class BoundedStack:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity")

    def push(self, item):
        return _Any()

    pop = peek = __len__ = push


"""


@pytest.mark.parametrize(
    ("name", "files"),
    [
        ("a lie the counterfactual run cannot see", {"src/minilib/__init__.py": INIT + SELECTIVE_LIE}),
        ("outcomes forged onto the check child's descriptors", {"src/minilib/__init__.py": INIT + FORGED_OUTCOMES}),
        ("always-equal answers", {CONTAINERS: HEAD + ALWAYS_EQUAL + LRU}),
    ],
)
def test_forgeries_of_a_class_task_earn_no_more_than_the_wrong_class(class_runtime, wrong, name, files):
    forged = _play(class_runtime, {CONTAINERS: HEAD + STACK_WRONG + LRU, **files})
    print(f"REWARD class-forgery:{name} {forged['reward']} (wrong alone {wrong['reward']})")
    assert forged["reward"] <= wrong["reward"] < 1.0, (name, forged)


def test_every_check_of_a_class_tasks_twin_fails_on_the_original(class_task, monkeypatch):
    monkeypatch.syspath_prepend(str(MINILIB / "src"))
    task = class_task
    made = twin_of(task.record, task.io_checks(), random.Random(3))
    assert made is not None
    for original, twin in zip(task.io_checks(), made[1], strict=True):
        record = replay_program(original.module, original.qualname, original.steps, original.reads, 10.0)
        assert judge(original, record).outcome == "passed", (original, record)
        assert judge(twin, record).outcome == "failed", twin
