"""A step a reader can follow: the files on the way from the HTTP adapter down to the sandbox stay few (issue 28).

A file counts when one of its functions is on the stack at a call from outside `sandbox/` into it, during one step over
HTTP on the in-memory server. The recorder's sinks, the models and the middleware are on the way back, not down.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest

from env_server.server import start_in_background
from tests.env_server.conftest import make_settings, memory_backend
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS

ROOT = f"{Path(__file__).resolve().parents[2]}/"
SANDBOX = f"{ROOT}sandbox/"


class DownPaths:
    """The project files on the stack at each call into `sandbox/` from outside it, while `on`."""

    def __init__(self) -> None:
        self.on, self.files = False, set[str]()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call" or not frame.f_code.co_filename.startswith(SANDBOX):
            return None
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        if caller.startswith(SANDBOX) or "/tests/" in caller:  # a test's stand-in for the engine is not on the way
            return None
        walk: FrameType | None = frame
        while walk is not None:
            name = walk.f_code.co_filename
            if name.startswith(ROOT) and "/site-packages/" not in name and "/tests/" not in name:
                self.files.add(name[len(ROOT) :])
            walk = walk.f_back
        return None


@pytest.fixture
def traced(memory_task_store, tmp_path) -> Iterator[tuple[DownPaths, httpx.Client]]:
    paths = DownPaths()
    sys.settrace(paths)  # before the server starts, so that its threads inherit it
    threading.settrace(paths)
    try:
        settings = make_settings(memory_task_store, tmp_path, host="127.0.0.1", port=0, grpc_port=0)
        with start_in_background(settings, memory_backend()) as server:
            with httpx.Client(base_url=server.http_url, timeout=120) as http:
                yield paths, http
    finally:
        sys.settrace(None)
        threading.settrace(None)


def _step(paths: DownPaths, http: httpx.Client, tool: str, **args: Any) -> set[str]:
    paths.on, paths.files = True, set()
    answer = http.post("/step", json={"action": {"tool": tool, "args": args}, "episode_id": "traced"})
    paths.on = False
    assert answer.status_code == 200, answer.text
    return paths.files


def test_a_run_step_reaches_the_sandbox_through_at_most_six_files_and_a_submit_through_ten(traced):
    paths, http = traced
    assert http.post("/reset", json={"task_id": DEMO_TASK_ID, "episode_id": "traced"}).status_code == 200
    _step(paths, http, "run", command="echo warm")
    run = _step(paths, http, "run", command="echo hi")
    assert run == {
        "env_server/environment.py",
        "env_server/stepping/episode.py",
        "env_server/stepping/tools.py",
        "sandbox/runtime/memory_sandbox.py",
    }
    _step(paths, http, "write_file", path="calc/ops.py", content=ORIGINAL_OPS)
    submit = _step(paths, http, "submit")
    # On the engine the sandbox's tar stream adds two files (docker_files, and change_set reading it): ten in all.
    assert submit == {
        "env_server/environment.py",
        "env_server/stepping/episode.py",
        "env_server/lifecycle/provisioning.py",
        "sandbox/lifecycle/warm_pool.py",
        "sandbox/lifecycle/memory_backend.py",
        "env_server/grading/submission.py",
        "env_server/grading/pristine.py",
        "env_server/grading/run.py",
        "sandbox/runtime/memory_sandbox.py",
    }
