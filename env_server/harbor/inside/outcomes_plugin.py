"""A pytest plugin: each test's outcome by node id, written as JSON to $REGROW_OUTCOMES when the session ends."""

import json
import os

_outcomes = {}


def pytest_runtest_logreport(report):
    # a test passes when its setup, call and teardown all did; any failed phase fails it
    if report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.when == "call" and report.passed:
        _outcomes.setdefault(report.nodeid, "passed")
    elif report.skipped:
        _outcomes.setdefault(report.nodeid, "skipped")


def pytest_collectreport(report):
    if report.failed:  # a file that does not import: its tests never run
        _outcomes[f"{report.nodeid}::<collection>"] = "error"


def pytest_sessionfinish(session):
    with open(os.environ["REGROW_OUTCOMES"], "w", encoding="utf-8") as out:
        json.dump(_outcomes, out)
