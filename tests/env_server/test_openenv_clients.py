"""The unmodified OpenEnv clients play whole episodes against the server; the HTTP surface is OpenEnv's."""

import asyncio
import json
import re
import subprocess
from pathlib import Path

import httpx
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from proto.actions import TOOL_ARGS
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS


def test_generic_env_client_plays_a_whole_episode_to_reward_one(memory_server):
    with GenericEnvClient(base_url=memory_server.http_url).sync() as env:
        first = env.reset(task_id=DEMO_TASK_ID)
        assert "clamp" in first.observation["problem_statement"]
        assert {tool["name"] for tool in first.observation["tools"]} == set(TOOL_ARGS)
        listed = env.step({"tool": "list_dir", "args": {"path": "calc"}})
        assert "ops.py" in listed.observation["output"]
        read = env.step({"tool": "read_file", "args": {"path": "calc/ops.py", "start_line": 16}})
        assert "raise NotImplementedError" in read.observation["output"]
        edited = env.step(
            {
                "tool": "edit_file",
                "args": {
                    "path": "calc/ops.py",
                    "old": "    raise NotImplementedError\n",
                    "new": ORIGINAL_OPS.split('high]."""\n')[1],
                },
            }
        )
        assert edited.observation["feedback"] is None
        ran = env.step({"tool": "run", "args": {"command": "python -m pytest -q tests 2>&1 | tail -1"}})
        assert "6 passed" in ran.observation["output"] and ran.observation["exit_code"] == 0
        state = env.state()
        assert state["task_id"] == DEMO_TASK_ID and state["step_count"] == 4
        final = env.step({"tool": "submit", "args": {}})
    assert final.done and final.reward == 1.0
    assert final.metadata["reward_details"]["f2p_passed"] == 3


def test_mcp_tool_client_lists_and_calls_tools_through_slash_mcp(memory_server):
    async def episode():
        async with MCPToolClient(base_url=memory_server.http_url) as env:
            await env.reset(task_id=DEMO_TASK_ID)
            tools = await env.list_tools()
            assert {tool.name for tool in tools} == set(TOOL_ARGS)
            assert "path" in next(t for t in tools if t.name == "read_file").input_schema["properties"]
            wrote = await env.call_tool("write_file", path="calc/ops.py", content=ORIGINAL_OPS)
            assert wrote["output"].startswith("wrote")
            return await env.call_tool("submit")

    final = asyncio.run(episode())
    assert final["done"] is True and final["reward"] == 1.0


def test_http_surface_serves_health_schema_metadata_and_docs(memory_server):
    server = memory_server  # the wire alone: no grading, no engine
    with httpx.Client(base_url=server.http_url) as http:
        assert http.get("/health").json()["status"] == "healthy"
        schema = http.get("/schema").json()
        assert {"tool", "args"} <= set(schema["action"]["properties"])
        assert "feedback" in schema["observation"]["properties"]
        assert "steps_left" in schema["state"]["properties"]
        assert http.get("/metadata").json()["name"] == "regrow-coding"
        assert http.get("/docs").status_code == 200
        assert "/episodes" in http.get("/openapi.json").json()["paths"]
        listed = http.post("/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1}).json()
        assert {tool["name"] for tool in listed["result"]["tools"]} == set(TOOL_ARGS)


def test_http_reset_and_step_continue_an_episode_named_by_episode_id(memory_server):
    server = memory_server  # the wire alone: no grading, no engine
    with httpx.Client(base_url=server.http_url, timeout=120) as http:
        reset = http.post("/reset", json={"task_id": DEMO_TASK_ID, "episode_id": "http-episode-1"})
        assert reset.status_code == 200 and reset.json()["metadata"]["episode_id"] == "http-episode-1"
        step = http.post(
            "/step", json={"action": {"tool": "run", "args": {"command": "echo hi"}}, "episode_id": "http-episode-1"}
        )
        assert step.json()["observation"]["output"] == "hi\n"
        final = http.post(
            "/step", json={"action": {"tool": "submit", "args": {}}, "episode_id": "http-episode-1"}
        ).json()
        assert final["done"] is True and final["reward"] == 0.0
        trace = http.get("/episodes/http-episode-1").json()
        assert trace["status"] == "submitted" and [s["action"]["tool"] for s in trace["steps"]] == ["run", "submit"]
        over = http.post(
            "/step", json={"action": {"tool": "run", "args": {"command": "true"}}, "episode_id": "http-episode-1"}
        )
        assert over.status_code == 404 and over.json()["code"] == "UNKNOWN_EPISODE"


def test_plain_http_reset_then_step_by_the_returned_id_plays_a_whole_episode(memory_server):
    server = memory_server  # the wire alone: no grading, no engine
    with httpx.Client(base_url=server.http_url, timeout=120) as http:
        reset = http.post("/reset", json={"task_id": DEMO_TASK_ID})
        assert reset.status_code == 200 and "clamp" in reset.json()["observation"]["problem_statement"]
        episode_id = reset.json()["metadata"]["episode_id"]
        assert episode_id in {episode.id for episode in server.runtime.live_episodes()}
        ran = http.post(
            "/step", json={"action": {"tool": "run", "args": {"command": "echo hi"}}, "episode_id": episode_id}
        )
        assert ran.status_code == 200 and ran.json()["observation"]["output"] == "hi\n"
        final = http.post("/step", json={"action": {"tool": "submit", "args": {}}, "episode_id": episode_id}).json()
        assert final["done"] is True and final["reward"] == 0.0
    assert episode_id not in {episode.id for episode in server.runtime.live_episodes()}
    assert server.runtime.traces.get_episode(episode_id).status == "submitted"


def test_plain_http_step_without_an_id_names_the_id_it_needs(memory_server):
    server = memory_server  # the wire alone: no grading, no engine
    with httpx.Client(base_url=server.http_url, timeout=120) as http:
        orphan_step = http.post("/step", json={"action": {"tool": "run", "args": {"command": "true"}}})
    assert orphan_step.status_code == 409 and orphan_step.json()["code"] == "NO_EPISODE"
    assert "episode_id" in orphan_step.json()["detail"] and "/reset" in orphan_step.json()["detail"]


def test_the_readme_curl_snippet_plays_an_episode(memory_server):
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    snippet = next(block for block in re.findall(r"```bash\n(.*?)```", readme, flags=re.DOTALL) if "/reset" in block)
    script = snippet.replace("http://127.0.0.1:8000", memory_server.http_url)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    ran, submitted = (json.loads(line) for line in result.stdout.splitlines() if line.strip())
    assert re.search(r"\d+ (passed|failed)", ran["observation"]["output"]), ran
    assert submitted["done"] is True and submitted["reward"] is not None
    assert memory_server.runtime.traces.get_episode(submitted["metadata"]["episode_id"]).status == "submitted"


def test_closing_the_mcp_tool_client_ends_its_episode(memory_server):
    server = memory_server  # the wire alone: no grading, no engine

    async def abandon() -> str:
        async with MCPToolClient(base_url=server.http_url) as env:
            reset = await env.reset(task_id=DEMO_TASK_ID)
            await env.call_tool("run", command="true")
            return reset.observation.metadata["episode_id"]

    episode_id = asyncio.run(abandon())
    assert episode_id not in {episode.id for episode in server.runtime.live_episodes()}
    assert server.runtime.traces.get_episode(episode_id).status == "aborted"
