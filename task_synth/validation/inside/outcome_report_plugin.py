"""pytest plugin, loaded in the sandbox as `-p regrow_report`: each test's outcome under pytest's own node id, written
as JSON (one {node id: passed} object per round) to REGROW_REPORT_OUT when the session ends.

With REGROW_SELECTED (a JSON list of node ids) it keeps only the listed tests, in the order the suite runs them. With
REGROW_REPEAT > 1 it runs the kept tests that many rounds in one process and tells each test its round (REGROW_ROUND).
"""

from __future__ import annotations

import json
import os
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


def pytest_runtest_logreport(report):
    outcomes = _rounds[_current[0]]
    outcomes[report.nodeid] = outcomes.get(report.nodeid, True) and report.outcome == "passed"


def pytest_sessionfinish(session):
    with open(os.environ["REGROW_REPORT_OUT"], "w") as out:
        json.dump(_rounds, out)
