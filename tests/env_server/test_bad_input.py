"""Every kind of bad input gets a clear error frame, feedback or 4xx, and the session and server stay healthy.

The wire is what is under test, so the server runs on the in-memory sandbox."""

import json

import httpx
import pytest
from websockets.sync.client import connect

from tests.task_fixture import DEMO_TASK_ID


@pytest.fixture(scope="module")
def server(memory_server):
    return memory_server


def ws_url(server) -> str:
    return server.http_url.replace("http://", "ws://") + "/ws"


def exchange(ws, message) -> dict:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=120))


def step(ws, tool, **args) -> dict:
    reply = exchange(ws, {"type": "step", "data": {"tool": tool, "args": args}})
    assert reply["type"] == "observation", reply
    return reply["data"]


@pytest.fixture
def session(server):
    with connect(ws_url(server), max_size=None) as ws:
        assert exchange(ws, {"type": "reset", "data": {"task_id": DEMO_TASK_ID}})["type"] == "observation"
        yield ws
        assert step(ws, "run", command="echo still-alive")["observation"]["output"] == "still-alive\n"
    with httpx.Client(base_url=server.http_url) as http:
        assert http.get("/health").json()["status"] == "healthy"


def test_malformed_json_gets_invalid_json_frame(session):
    reply = exchange(session, '{"type": "step", "data": ')
    assert reply["type"] == "error" and reply["data"]["code"] == "INVALID_JSON"


def test_unknown_frame_type_gets_unknown_type_frame(session):
    reply = exchange(session, {"type": "teleport", "data": {}})
    assert reply["data"]["code"] == "UNKNOWN_TYPE" and "teleport" in reply["data"]["message"]


def test_missing_fields_get_validation_errors_or_schema_feedback(session):
    assert exchange(session, {"type": "step"})["data"]["code"] == "VALIDATION_ERROR"
    assert exchange(session, {"type": "step", "data": {"args": {}}})["data"]["code"] == "VALIDATION_ERROR"
    observation = step(session, "read_file")["observation"]
    assert "arguments don't fit read_file" in observation["feedback"] and '"path"' in observation["feedback"]


def test_unknown_tool_feedback_lists_the_tools(session):
    observation = step(session, "rm_rf")["observation"]
    assert "unknown tool 'rm_rf'" in observation["feedback"] and "edit_file" in observation["feedback"]


def test_oversize_write_is_refused_and_nothing_is_written(session):
    observation = step(session, "write_file", path="big.txt", content="x" * (1024 * 1024 + 1))["observation"]
    assert "over the 1048576-byte write limit" in observation["feedback"]
    assert "no such file" in step(session, "read_file", path="big.txt")["observation"]["feedback"]


def test_invalid_utf8_text_is_refused(session):
    # A JSON escape of a lone surrogate is the one way invalid UTF-8 text reaches a tool through valid JSON.
    reply = exchange(
        session, '{"type": "step", "data": {"tool": "write_file", "args": {"path": "u.py", "content": "\\udcff"}}}'
    )
    assert "not valid UTF-8" in reply["data"]["observation"]["feedback"]


def test_invalid_utf8_bytes_over_http_get_a_4xx(server):
    with httpx.Client(base_url=server.http_url) as http:
        answer = http.post(
            "/step",
            content=b'{"action": {"tool": "run", "args": {"command": "\xff\xfe"}}}',
            headers={"content-type": "application/json"},
        )
    assert 400 <= answer.status_code < 500


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "calc/../../root", "/workspace/../tmp/x"])
def test_paths_outside_the_workspace_are_refused(session, path):
    for tool, args in (("read_file", {}), ("write_file", {"content": "x"}), ("list_dir", {})):
        observation = step(session, tool, path=path, **args)["observation"]
        assert "outside /workspace" in observation["feedback"], (tool, observation)
        assert observation["metadata"]["tool_error"] == "PATH_OUTSIDE"


def test_symlinks_out_of_the_workspace_are_refused(session):
    step(session, "run", command="ln -s /opt/venv venv_link && ln -s /etc/hostname host_link")
    wrote = step(session, "write_file", path="venv_link/lib/python3.11/site-packages/evil.pth", content="import os\n")
    assert "through a symlink" in wrote["observation"]["feedback"]
    assert "through a symlink" in step(session, "read_file", path="host_link")["observation"]["feedback"]
    assert (
        step(session, "run", command="ls /opt/venv/lib/python3.11/site-packages/evil.pth")["observation"]["exit_code"]
        != 0
    )


@pytest.mark.parametrize("timeout, hint", [(-1, "greater than 0"), (0, "greater than 0"), (1e9, "over the server cap")])
def test_negative_or_huge_timeouts_are_refused(session, timeout, hint):
    observation = step(session, "run", command="true", timeout=timeout)["observation"]
    assert hint in observation["feedback"] and observation["exit_code"] is None


def test_unknown_task_gets_an_error_frame_and_a_404(server, session):
    reply = exchange(session, {"type": "reset", "data": {"task_id": "no-such-task"}})
    assert reply["type"] == "error" and "UNKNOWN_TASK" in reply["data"]["message"]
    with httpx.Client(base_url=server.http_url) as http:
        answer = http.post("/reset", json={"task_id": "no-such-task"})
    assert answer.status_code == 404 and answer.json()["code"] == "UNKNOWN_TASK"


def test_step_before_reset_gets_an_error_frame(server):
    with connect(ws_url(server)) as ws:
        reply = exchange(ws, {"type": "step", "data": {"tool": "run", "args": {"command": "true"}}})
        assert reply["type"] == "error" and "reset first" in reply["data"]["message"]
        assert exchange(ws, {"type": "reset", "data": {"task_id": DEMO_TASK_ID}})["type"] == "observation"


@pytest.mark.parametrize(
    "body",
    [b'{"action": ', b"{}", b'{"action": {"args": {}}}', b'{"action": {"tool": "run", "args": {}}, "timeout_s": -1}'],
)
def test_malformed_or_incomplete_http_steps_get_a_4xx(server, body):
    with httpx.Client(base_url=server.http_url) as http:
        answer = http.post("/step", content=body, headers={"content-type": "application/json"})
        assert 400 <= answer.status_code < 500, answer.text
        assert http.get("/health").status_code == 200
