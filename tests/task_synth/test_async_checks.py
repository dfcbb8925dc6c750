"""A deleted async function's calls: the outcome is what awaiting the call gave, recorded under the tests, replayed
by awaiting on a fresh event loop, varied, and judged (no Docker). Before, the recorder skipped async functions, so
such a unit had no check and was not deleted."""

import random

from env_server.grading.checks import judge
from proto.call_replay import replay
from task_synth.validation.call_runs import call_outcomes, reproduced
from task_synth.validation.recorded_calls import parsed_call
from task_synth.validation.unseen_calls import perturbed_calls, recorded_arguments
from tests.task_synth.recorder_runs import LocalSandbox, importable_module, recorded_raw_calls

FUNCTIONS = {"aio.core": ["scaled", "Tally.add"]}
ORIGINAL = """
import asyncio


async def scaled(x, factor=10):
    await asyncio.sleep(0)
    if x < 0:
        raise ValueError(x)
    return [x * factor]


class Tally:
    def __init__(self):
        self.total = 0

    async def add(self, n):
        await asyncio.sleep(0)
        self.total += n
        return self.total
"""
FILES = {
    "aio/__init__.py": "",
    "aio/core.py": ORIGINAL,
    "tests/test_aio.py": """
import asyncio

import pytest

from aio.core import Tally, scaled


def test_scaled():
    assert asyncio.run(scaled(3)) == [30]
    assert asyncio.run(scaled(2, factor=3)) == [6]


def test_negative():
    with pytest.raises(ValueError):
        asyncio.run(scaled(-1))


def test_tally():
    tally = Tally()
    asyncio.run(tally.add(2))
    assert asyncio.run(tally.add(5)) == 7
""",
}


def test_an_async_functions_calls_are_recorded_with_what_awaiting_them_gave_and_replay_alike(tmp_path):
    raw = recorded_raw_calls(tmp_path, FILES, FUNCTIONS)
    calls = [call for item in raw if (call := parsed_call(item, FUNCTIONS))]
    assert sorted((c.check.qualname, c.check.args, c.check.kwargs, c.check.result, c.check.raises) for c in calls) == [
        ("Tally.add", "(2,)", "{}", "2", None),
        ("Tally.add", "(5,)", "{}", "7", None),
        ("scaled", "(-1,)", "{}", None, "ValueError"),
        ("scaled", "(2,)", "{'factor': 3}", "[6]", None),
        ("scaled", "(3,)", "{}", "[30]", None),
    ]
    assert all(call.check.inputs for call in calls if call.check.qualname == "Tally.add")  # the receiver, pickled
    assert len(reproduced(LocalSandbox(tmp_path), calls)) == len(calls)
    probes = perturbed_calls(calls, recorded_arguments(raw), random.Random(0), limit=12)
    outcomes = [call for call in call_outcomes(LocalSandbox(tmp_path), probes, "1", 1.0, 15.0) if call is not None]
    assert {"[40]", "[0]", "[9]"} & {call.check.result for call in outcomes}  # scaled(4), scaled(0), factor 3 -> 3
    assert all(call.check.result is None or "coroutine" not in call.check.result for call in outcomes)


def test_a_rewrite_is_judged_by_what_its_awaited_call_gives(tmp_path, monkeypatch):
    """The original's check passes the original and a sync-free honest rewrite, and fails one off by a factor."""
    raw = recorded_raw_calls(tmp_path, FILES, FUNCTIONS)
    (check,) = [c.check for item in raw if (c := parsed_call(item, FUNCTIONS)) and c.check.args == "(3,)"]
    honest = "async def scaled(x, factor=10):\n    if x < 0:\n        raise ValueError(x)\n    return [factor * x]\n"
    wrong = honest.replace("factor * x", "factor * x + 1")
    for source, passes in ((ORIGINAL, True), (honest, True), (wrong, False)):
        importable_module(tmp_path / f"rewrite{len(source)}", monkeypatch, "aio.core", source)
        found = replay({"module": "aio.core", "qualname": "scaled", "args": check.args, "kwargs": check.kwargs}, 5.0)
        assert (judge(check, found).outcome == "passed") is passes, (source, found)
