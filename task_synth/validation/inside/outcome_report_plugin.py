"""pytest plugin, loaded in the sandbox as `-p regrow_report`: each test's outcome under pytest's own node id, written
as JSON (one {node id: passed} object per round) to REGROW_REPORT_OUT when the session ends.

With REGROW_SELECTED (a JSON list of node ids) it keeps only the listed tests, in the order the suite runs them. With
REGROW_REPEAT > 1 it runs the kept tests that many rounds in one process and tells each test its round (REGROW_ROUND).
With REGROW_ROUND_BUDGET_S, a round whose tests run past that many seconds is over: the test running then fails
and the round's other tests are skipped, so one round that loops (a trivial stand-in's `while answer:`) costs its
budget, not the whole process.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest

_repeat = max(1, int(os.environ.get("REGROW_REPEAT", "1")))
_seen: Counter[str] = Counter()
_rounds: list[dict[str, bool]] = [{} for _ in range(_repeat)]
_current = [0]
_selected: set[str] | None = None
if os.environ.get("REGROW_SELECTED"):
    with open(os.environ["REGROW_SELECTED"]) as listed:
        _selected = set(json.load(listed))
_budget = float(os.environ.get("REGROW_ROUND_BUDGET_S", "0"))
REARM_S = 0.5
_round_started: dict[int, float] = {}
_over: set[int] = set()


class RoundOverBudget(BaseException):
    """Raised into a test when its round's budget is spent: a BaseException, so `except Exception` keeps looping no
    longer than the budget."""


def _out_of_time(signum, frame):
    _over.add(_current[0])
    raise RoundOverBudget(f"round {_current[0]} ran past its {_budget:g}s")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if _selected is not None:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in _selected])
        items[:] = [item for item in items if item.nodeid in _selected]
    items[:] = items * _repeat


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = min(_seen[item.nodeid], _repeat - 1)
    _seen[item.nodeid] += 1
    os.environ["REGROW_ROUND"] = str(_current[0])
    _round_started.setdefault(_current[0], time.monotonic())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _current[0] in _over:
        pytest.skip("its round ran past its budget")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not _budget:
        yield
        return
    left = _round_started[_current[0]] + _budget - time.monotonic()
    if left <= 0:
        _over.add(_current[0])
        pytest.fail("its round ran past its budget", pytrace=False)
    previous = signal.signal(signal.SIGALRM, _out_of_time)
    # Again every REARM_S after the first: code that swallows the first BaseException and loops on gets the next.
    signal.setitimer(signal.ITIMER_REAL, left, REARM_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def pytest_runtest_logreport(report):
    outcomes = _rounds[_current[0]]
    outcomes[report.nodeid] = outcomes.get(report.nodeid, True) and report.outcome == "passed"


def pytest_sessionfinish(session):
    with open(os.environ["REGROW_REPORT_OUT"], "w") as out:
        json.dump(_rounds, out)
