"""The report plugin's round budget: a round that loops costs its budget, and the other rounds still run (no Docker:
the plugin runs in a pytest on this host, as it does in the sandbox)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

PLUGINS = Path(__file__).parents[2] / "task_synth" / "validation" / "inside"

LOOPING = """
import os, time

def test_first():
    assert True

def test_loops_in_round_zero():
    open("looping", "w").close()  # the runner's cue: the loop has begun
    while os.environ["REGROW_ROUND"] == "0":
        try:
            time.sleep(0.01)
        except Exception:  # a stand-in's loop may swallow Exception: the budget is a BaseException
            pass

def test_swallows_the_first_alarm_in_round_zero():
    if os.environ["REGROW_ROUND"] != "0":
        return
    try:
        while True:
            time.sleep(0.01)
    except BaseException:  # `except:` around a retry loop, as library code has
        pass
    while True:
        time.sleep(0.01)

def test_last():
    assert True
"""


def _pytest(tmp_path: Path, budget: str | None, only: str | None = None) -> tuple[list[str], dict[str, str]]:
    (tmp_path / "test_loop.py").write_text(LOOPING)
    env = {**os.environ, "REGROW_REPEAT": "2", "REGROW_REPORT_OUT": str(tmp_path / "report.json")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the plugins named with -p only, as in a task's image
    env["PYTHONPATH"] = str(PLUGINS)
    if budget:
        env["REGROW_ROUND_BUDGET_S"] = budget
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "outcome_report_plugin"]
    return [*command, f"test_loop.py::{only}" if only else "test_loop.py"], env


def _run(tmp_path: Path, budget: str, only: str | None = None) -> list[dict[str, bool]]:
    command, env = _pytest(tmp_path, budget, only)
    subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, timeout=60)
    return json.loads((tmp_path / "report.json").read_text())


def test_a_looping_round_ends_at_its_budget_and_the_next_round_runs(tmp_path):
    rounds = _run(tmp_path, "1")
    first, second = rounds
    assert first == {
        "test_loop.py::test_first": True,
        "test_loop.py::test_loops_in_round_zero": False,
        "test_loop.py::test_swallows_the_first_alarm_in_round_zero": False,
        "test_loop.py::test_last": False,
    }  # skipped once the round was over: not passed
    assert all(second.values()) and len(second) == 4


def test_a_test_that_swallows_the_first_alarm_gets_the_next(tmp_path):
    rounds = _run(tmp_path, "1", only="test_swallows_the_first_alarm_in_round_zero")
    assert rounds[0] == {"test_loop.py::test_swallows_the_first_alarm_in_round_zero": False}
    assert rounds[1] == {"test_loop.py::test_swallows_the_first_alarm_in_round_zero": True}


def test_without_a_budget_the_loop_holds_the_process(tmp_path):
    """Before, a 3 s timeout stood for "it holds", and a pytest slow to start on a loaded machine passed it too."""
    command, env = _pytest(tmp_path, None)
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "looping").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "looping").exists(), "the looping test never started"
        time.sleep(1.5)  # past the 1 s budget the other tests give the same loop
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()
