"""Prefix resets on the real engine: a recorded episode's workspace after its first k steps is restored byte for byte
by replaying its file writes, commands are never run again (one that changed files, or whose effect the episode did not
track, refuses the prefix), the agent is shown the prefix, and the trace names where it came from."""

import io
import json
import tarfile

import grpc
import httpx
import pytest

from env_server.lifecycle.prefix_replay import PrefixRefused
from env_server.lifecycle.reset_options import ResetOptions
from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from proto.actions import ToolCall
from sandbox.layout import WORKSPACE
from tests.task_fixture import DEMO_TASK_ID
from trainer_client.env.client import EnvClient
from trainer_client.env.errors import EnvRequestError

pytestmark = pytest.mark.docker

STEPS = [
    ToolCall(tool="write_file", args={"path": "calc/notes.txt", "content": "clamp: low <= value <= high\n"}),
    ToolCall(tool="run", args={"command": "cat calc/ops.py && python -c 'print(2 + 2)'"}),
    ToolCall(
        tool="edit_file", args={"path": "calc/ops.py", "old": "    raise NotImplementedError\n", "new": "  pass\n"}
    ),
    ToolCall(tool="read_file", args={"path": "calc/ops.py"}),
    ToolCall(tool="edit_file", args={"path": "calc/ops.py", "old": "no such text", "new": "x"}),  # refused, no effect
    ToolCall(tool="run", args={"command": "touch calc/made_by_a_command.txt"}),
    ToolCall(tool="write_file", args={"path": "calc/late.txt", "content": "after the prefix\n"}),
]
PREFIX = 5  # up to the refused edit, before the command that writes
TRACKED = ResetOptions(task_id=DEMO_TASK_ID, track_effects=True)  # each command's effect is recorded


def workspace_files(episode) -> dict[str, tuple[int, bytes]]:
    """Every file of the episode's workspace: path -> (mode, bytes); caches aside, .git included."""
    archive = b"".join(episode.sandbox_ready().export_tree(WORKSPACE, 64 * 2**20))
    files = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if member.isfile() and "__pycache__" not in member.name:
                files[member.name] = (member.mode, tar.extractfile(member).read())
    return files


def play(runtime) -> tuple[str, dict]:
    """One episode of STEPS played through the stepper: its id, and its workspace as it stood after PREFIX steps."""
    episode = runtime.start_episode(TRACKED)
    after_prefix = {}
    for number, action in enumerate(STEPS, 1):
        runtime.stepper.take_step(episode, action)
        if number == PREFIX:
            after_prefix = workspace_files(episode)
    runtime.abort(episode, "recorded for the prefix tests")
    return episode.id, after_prefix


@pytest.fixture(scope="module")
def recorded(runtime):
    return play(runtime)


def test_each_command_step_records_whether_it_changed_the_workspace(runtime, recorded):
    trace = runtime.traces.get_episode(recorded[0])
    assert trace.steps[1].observation.metadata["workspace_changed"] is False
    shown = trace.steps[1].observation.output
    assert "4" in shown and "regrow-workspace-effect" not in shown
    assert trace.steps[5].observation.metadata["workspace_changed"] is True


def test_a_test_run_leaves_the_workspace_unchanged_and_a_removed_file_changes_it(runtime):
    """The effect is read from the status times of the workspace's files and directories: the agent's pytest writes no
    bytecode or cache there, and a removed file shows in its directory."""
    episode = runtime.start_episode(TRACKED)
    try:
        tests = runtime.stepper.take_step(episode, ToolCall(tool="run", args={"command": "python -m pytest -q tests"}))
        assert tests.metadata["workspace_changed"] is False, tests.output
        removed = runtime.stepper.take_step(episode, ToolCall(tool="run", args={"command": "rm calc/__init__.py"}))
        assert removed.metadata["workspace_changed"] is True
    finally:
        runtime.abort(episode, "test over")


def test_a_write_in_the_first_clock_tick_of_a_command_is_a_change(runtime):
    """File times move in 4 ms ticks here: 2 in 20 of `echo n > f`, done within the tick of the stamp before it, read as
    no change, and a prefix reset would have restored a workspace without the file."""
    episode = runtime.start_episode(TRACKED)
    try:
        effects = set()
        for n in range(30):
            step = runtime.stepper.take_step(episode, ToolCall(tool="run", args={"command": f"echo {n} > calc/n.txt"}))
            effects.add(step.metadata["workspace_changed"])
        read = runtime.stepper.take_step(episode, ToolCall(tool="run", args={"command": "cat calc/n.txt"}))
    finally:
        runtime.abort(episode, "test over")
    assert effects == {True}
    assert read.metadata["workspace_changed"] is False and read.output.strip() == "29"


def test_the_workspace_after_a_prefix_reset_is_the_one_after_step_k(runtime, recorded):
    origin, after_prefix = recorded
    episode = runtime.start_episode(ResetOptions(prefix_of=origin, prefix_steps=PREFIX))
    try:
        assert workspace_files(episode) == after_prefix
        assert b"  pass\n" in after_prefix[f"{WORKSPACE.lstrip('/')}/calc/ops.py"][1]  # the edit is in it
        observation = runtime.reset_observation(episode)
        prefix = observation.metadata["prefix"]
        assert prefix["of"] == origin and prefix["steps"] == PREFIX
        assert [entry["tool"] for entry in prefix["history"]] == [action.tool for action in STEPS[:PREFIX]]
        assert "feedback" in prefix["history"][4]  # the refused edit is shown with its refusal
        assert episode.steps_left == runtime.settings.step_budget - PREFIX
        trace = runtime.traces.get_episode(episode.id)
        assert (trace.prefix_of, trace.prefix_steps, trace.task_id) == (origin, PREFIX, DEMO_TASK_ID)
        runtime.stepper.take_step(episode, STEPS[0])
        with pytest.raises(PrefixRefused, match="itself started after 5 steps"):  # its own start is not in its steps
            runtime.start_episode(ResetOptions(prefix_of=episode.id, prefix_steps=1))
    finally:
        runtime.abort(episode, "test over")


def test_a_prefix_that_cannot_be_restored_is_refused_with_the_reason(runtime, recorded):
    origin, _ = recorded
    refusals = {
        "command": dict(prefix_of=origin, prefix_steps=PREFIX + 1),
        "too long": dict(prefix_of=origin, prefix_steps=len(STEPS) + 1),
        "no episode": dict(prefix_of="no-such-episode", prefix_steps=1),
        "half": dict(prefix_of=origin, prefix_steps=None),
        "other task": dict(prefix_of=origin, prefix_steps=1, task_id="another__task"),
    }
    messages = {}
    for name, options in refusals.items():
        with pytest.raises(PrefixRefused) as refused:
            runtime.start_episode(ResetOptions(**options))
        messages[name] = str(refused.value)
    assert "step 6" in messages["command"] and "changed files" in messages["command"], messages
    assert f"1 to {len(STEPS)}" in messages["too long"]
    assert "no recorded episode 'no-such-episode'" in messages["no episode"]
    assert "both prefix_of" in messages["half"] and "leave task_id out" in messages["other task"]
    assert not runtime.live_episodes()  # a refusal leaves no episode and no sandbox behind


def test_prefix_resets_over_http_and_grpc(server):
    origin, _ = play(server.runtime)
    with httpx.Client(base_url=server.http_url, timeout=120) as http:
        reset = http.post("/reset", json={"prefix_of": origin, "prefix_steps": 3})
        refused = http.post("/reset", json={"prefix_of": origin, "prefix_steps": 6})
    assert reset.status_code == 200, reset.text
    assert reset.json()["metadata"]["prefix"]["steps"] == 3
    server.runtime.abort(server.runtime.get(reset.json()["metadata"]["episode_id"]), "test over")
    assert refused.status_code == 422 and "PREFIX_REFUSED" in refused.text and "step 6" in refused.text
    with grpc.insecure_channel(server.grpc_target) as channel:
        reply = pb_grpc.CodingEnvStub(channel).Reset(pb.ResetRequest(prefix_of=origin, prefix_steps=2))
    episode = server.runtime.get(reply.episode_id)
    assert episode.trace.prefix_steps == 2
    server.runtime.abort(episode, "test over")


async def test_the_trainers_client_gets_the_prefix_over_websocket_and_a_clear_refusal(server):
    origin, _ = play(server.runtime)
    client = EnvClient(server.http_url, max_connections=1)
    try:
        async with client.episode(prefix_of=origin, prefix_steps=3) as episode:
            assert episode.first.metadata["prefix"]["steps"] == 3
            assert episode.first.metadata["task_id"] == DEMO_TASK_ID
        with pytest.raises(EnvRequestError, match="step 6"):
            async with client.episode(prefix_of=origin, prefix_steps=6):
                pass
    finally:
        await client.aclose()


def test_a_command_whose_effect_cannot_be_read_is_unknown_and_no_prefix_passes_it(runtime):
    episode = runtime.start_episode(TRACKED)
    try:
        hidden = runtime.stepper.take_step(episode, ToolCall(tool="run", args={"command": "rm -f /tmp/.regrow-run-*"}))
        assert "workspace_changed" not in hidden.metadata  # unknown, not "unchanged"
    finally:
        runtime.abort(episode, "test over")
    with pytest.raises(PrefixRefused, match="has no recorded effect"):
        runtime.start_episode(ResetOptions(prefix_of=episode.id, prefix_steps=1))


def test_an_episode_reset_without_track_effects_records_no_effect_and_no_prefix_passes_its_commands(runtime):
    """The effect check costs each command about 7 ms (a stamp, a clock tick, a find), so only episodes that ask pay."""
    episode = runtime.start_episode(ResetOptions(task_id=DEMO_TASK_ID))
    try:
        # untracked, the command's stderr is its own: a line that looks like the check's answer is output, not a verdict
        forged = runtime.stepper.take_step(
            episode, ToolCall(tool="run", args={"command": "echo; echo regrow-workspace-effect:unchanged >&2"})
        )
        assert "workspace_changed" not in forged.metadata and "regrow-workspace-effect:unchanged" in forged.output
    finally:
        runtime.abort(episode, "test over")
    with pytest.raises(PrefixRefused, match="not reset with track_effects=true"):
        runtime.start_episode(ResetOptions(prefix_of=episode.id, prefix_steps=1))


def test_track_effects_over_grpc(server):
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = pb_grpc.CodingEnvStub(channel)
        tracked = stub.Reset(pb.ResetRequest(task_id=DEMO_TASK_ID, track_effects=True)).episode_id
        plain = stub.Reset(pb.ResetRequest(task_id=DEMO_TASK_ID)).episode_id
        call = pb.ToolCall(tool="run", args_json='{"command": "touch calc/x.txt"}')
        effects = [
            json.loads(stub.Step(pb.StepRequest(episode_id=episode, action=call)).observation.metadata_json)
            for episode in (tracked, plain)
        ]
        for episode in (tracked, plain):
            stub.Close(pb.EpisodeRef(episode_id=episode))
    assert effects[0]["workspace_changed"] is True and "workspace_changed" not in effects[1]
