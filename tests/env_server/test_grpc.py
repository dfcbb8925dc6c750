"""gRPC: unary calls and the Episode stream with the /ws semantics, health, reflection, fresh stubs."""

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS

ROOT = Path(__file__).resolve().parents[2]


def test_generated_stubs_match_the_proto_file(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            "proto/coding_env.proto",
        ],
        cwd=ROOT,
        check=True,
    )
    for name in ("coding_env_pb2.py", "coding_env_pb2.pyi", "coding_env_pb2_grpc.py"):
        assert (tmp_path / "proto" / name).read_text() == (ROOT / "proto" / name).read_text(), (
            f"proto/{name} is stale: regenerate it with the command at the top of proto/coding_env.proto"
        )


@pytest.fixture(scope="module")
def channel(memory_server):
    with grpc.insecure_channel(memory_server.grpc_target) as opened:
        yield opened


def call(tool, **args):
    return pb.ToolCall(tool=tool, args_json=json.dumps(args))


def test_unary_calls_play_an_episode_to_reward_one(channel):
    stub = pb_grpc.CodingEnvStub(channel)
    reset = stub.Reset(pb.ResetRequest(task_id=DEMO_TASK_ID))
    assert "clamp" in reset.observation.problem_statement
    assert len(json.loads(reset.observation.tools_json)) == 7
    episode = reset.episode_id
    wrote = stub.Step(
        pb.StepRequest(episode_id=episode, action=call("write_file", path="calc/ops.py", content=ORIGINAL_OPS))
    )
    assert not wrote.observation.HasField("feedback")
    assert stub.State(pb.EpisodeRef(episode_id=episode)).step_count == 1
    final = stub.Step(pb.StepRequest(episode_id=episode, action=call("submit")))
    assert final.observation.done and final.observation.reward == 1.0
    assert json.loads(final.observation.metadata_json)["reward_details"]["f2p_passed"] == 3


def test_unary_errors_carry_status_and_openenv_code(channel):
    stub = pb_grpc.CodingEnvStub(channel)
    with pytest.raises(grpc.RpcError) as unknown_task:
        stub.Reset(pb.ResetRequest(task_id="no-such-task"))
    assert unknown_task.value.code() == grpc.StatusCode.NOT_FOUND
    assert ("regrow-error-code", "UNKNOWN_TASK") in unknown_task.value.trailing_metadata()
    episode = stub.Reset(pb.ResetRequest(task_id=DEMO_TASK_ID)).episode_id
    with pytest.raises(grpc.RpcError) as bad_json:
        stub.Step(pb.StepRequest(episode_id=episode, action=pb.ToolCall(tool="run", args_json="{not json")))
    assert bad_json.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    still_alive = stub.Step(pb.StepRequest(episode_id=episode, action=call("run", command="echo ok")))
    assert still_alive.observation.output == "ok\n"
    assert stub.Close(pb.EpisodeRef(episode_id=episode)).closed
    with pytest.raises(grpc.RpcError) as closed:
        stub.State(pb.EpisodeRef(episode_id=episode))
    assert closed.value.code() == grpc.StatusCode.NOT_FOUND


def test_episode_stream_answers_each_frame_and_survives_errors(channel):
    stub = pb_grpc.CodingEnvStub(channel)
    frames = [
        pb.ClientFrame(step=call("run", command="true")),  # before reset: an error frame
        pb.ClientFrame(reset=pb.ResetRequest(task_id=DEMO_TASK_ID)),
        pb.ClientFrame(),  # empty frame: UNKNOWN_TYPE
        pb.ClientFrame(step=pb.ToolCall(tool="run", args_json="[1")),
        pb.ClientFrame(step=call("nope")),
        pb.ClientFrame(state=pb.Empty()),
        pb.ClientFrame(step=call("write_file", path="calc/ops.py", content=ORIGINAL_OPS)),
        pb.ClientFrame(step=call("submit")),
        pb.ClientFrame(close=pb.Empty()),
    ]
    replies = list(stub.Episode(iter(frames)))
    kinds = [reply.WhichOneof("frame") for reply in replies]
    assert kinds == ["error", "observation", "error", "error", "observation", "state", "observation", "observation"]
    assert replies[0].error.code == "EXECUTION_ERROR" and "reset first" in replies[0].error.message
    assert replies[2].error.code == "UNKNOWN_TYPE"
    assert replies[3].error.code == "INVALID_JSON"
    assert "unknown tool 'nope'" in replies[4].observation.observation.feedback
    assert replies[5].state.task_id == DEMO_TASK_ID
    assert replies[7].observation.observation.reward == 1.0


def test_health_and_reflection_services_answer(channel):
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="regrow.env.v1.CodingEnv"))
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    answer = next(reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {service.name for service in answer.list_services_response.service}
    assert "regrow.env.v1.CodingEnv" in names and "grpc.health.v1.Health" in names
