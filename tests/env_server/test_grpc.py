"""gRPC: unary calls and the Episode stream with the /ws semantics, health, reflection, fresh stubs."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from packaging.requirements import Requirement

from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS

ROOT = Path(__file__).resolve().parents[2]


# Where a generator writes its own version into the stubs: grpcio-tools' and protoc's, which say nothing of the .proto.
VERSION_STAMPS = (
    (re.compile(r"GRPC_GENERATED_VERSION = '[\d.]+'"), "GRPC_GENERATED_VERSION = 'X'"),
    (re.compile(r"# Protobuf Python Version: [\d.]+"), "# Protobuf Python Version: X"),
    (
        re.compile(r"(ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,)\s*\d+,\s*\d+,\s*\d+,"),
        r"\1 X,",
    ),
)


def _without_version_stamps(text: str) -> str:
    for pattern, replacement in VERSION_STAMPS:
        text = pattern.sub(replacement, text)
    return text


def _stamps(root: Path) -> tuple[str, str]:
    """The grpcio and protobuf versions the committed stubs were made with (and need at least, at run time)."""
    grpc_stamp = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", (root / "coding_env_pb2_grpc.py").read_text())
    protobuf_stamp = re.search(r"# Protobuf Python Version: ([\d.]+)", (root / "coding_env_pb2.py").read_text())
    assert grpc_stamp and protobuf_stamp
    return grpc_stamp[1], protobuf_stamp[1]


def test_generated_stubs_match_the_proto_file(tmp_path):
    """The stubs say what the .proto says: a newer grpcio-tools on the index changes only its version stamps."""
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
        made, committed = (tmp_path / "proto" / name).read_text(), (ROOT / "proto" / name).read_text()
        assert _without_version_stamps(made) == _without_version_stamps(committed), (
            f"proto/{name} is stale: regenerate it with the command at the top of proto/coding_env.proto"
        )


def test_the_version_stamps_are_ignored_and_nothing_else():
    committed = (ROOT / "proto" / "coding_env_pb2.py").read_text()
    bumped = committed.replace("# Protobuf Python Version: ", "# Protobuf Python Version: 9").replace(
        "    35,", "    99,"
    )
    assert bumped != committed and _without_version_stamps(bumped) == _without_version_stamps(committed)
    assert _without_version_stamps(committed.replace("CodingEnv", "CodingEnvX")) != _without_version_stamps(committed)


def test_the_install_requires_at_least_the_runtime_the_committed_stubs_were_made_for():
    """The stubs raise at import under an older grpcio or protobuf, so the floors in pyproject.toml are theirs, and
    the dev extra pins the grpcio-tools that made them."""
    grpc_stamp, protobuf_stamp = _stamps(ROOT / "proto")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {Requirement(line).name: Requirement(line).specifier for line in project["dependencies"]}
    for name in ("grpcio", "grpcio-health-checking", "grpcio-reflection"):
        assert f">={grpc_stamp}" in {str(spec) for spec in floors[name]}, name
    assert f">={protobuf_stamp}" in {str(spec) for spec in floors["protobuf"]}
    tools = [Requirement(line) for line in project["optional-dependencies"]["dev"] if line.startswith("grpcio-tools")]
    assert [str(tools[0].specifier)] == [f"=={grpc_stamp}"]


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
