"""The gRPC transport of the env client: one `CodingEnv.Episode` stream per connection, like one /ws socket.

gRPC's ToolCall carries only the tool and its arguments, so action metadata (the turn's raw text)
does not reach the server's traces on this path.
"""

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

import grpc

from proto import ENVIRONMENT_FAILURES, CodingObservation, ToolCall
from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from trainer_client.env.errors import (
    CAPACITY_REACHED,
    EnvAtCapacity,
    EnvRequestError,
    EnvTransportError,
    checked_observation,
    lost_episode_error,
    refusal_code,
)

TEXT_RESET_OPTIONS = ("task_id", "split", "sampler", "prefix_of", "origin", "run_id")  # "" on the wire: not given


def observation_from_proto(message: pb.Observation) -> CodingObservation:
    """A gRPC Observation as the proto model the agent loop reads."""
    return CodingObservation(
        output=message.output,
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        truncated=message.truncated,
        feedback=message.feedback if message.HasField("feedback") else None,
        problem_statement=message.problem_statement if message.HasField("problem_statement") else None,
        tools=json.loads(message.tools_json) if message.tools_json else None,
        done=message.done,
        reward=message.reward if message.HasField("reward") else None,
        metadata=json.loads(message.metadata_json) if message.metadata_json else {},
    )


class GrpcConnection:
    """One open Episode stream; requests on it are strictly one at a time."""

    def __init__(self, channel: grpc.aio.Channel, target: str, request_timeout: float):
        self._channel = channel
        self._target = target
        self._stream = pb_grpc.CodingEnvStub(channel).Episode()
        self._request_timeout = request_timeout
        self._lock = asyncio.Lock()
        self.broken = False

    @classmethod
    async def open(cls, url: str, open_timeout: float, request_timeout: float) -> "GrpcConnection":
        target = urlsplit(url).netloc
        channel = grpc.aio.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 * 2**20)])
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout=open_timeout)
        except TimeoutError as error:
            await channel.close()
            raise EnvTransportError(
                f"cannot reach the gRPC env server at {target} within {open_timeout:.0f}s; is `regrow serve` running?"
            ) from error
        return cls(channel, target, request_timeout)

    async def _request(self, frame: pb.ClientFrame, what: str) -> pb.EpisodeReply:
        if self.broken:
            raise EnvTransportError(f"gRPC stream to {self._target} is broken; start a fresh episode")
        async with self._lock:
            try:
                await self._stream.write(frame)
                async with asyncio.timeout(self._request_timeout):  # not wait_for: it can swallow a cancel (3.11)
                    reply = await self._stream.read()
            except TimeoutError as error:
                self.broken = True
                raise EnvTransportError(
                    f"no reply to {what!r} from {self._target} within {self._request_timeout:.0f}s"
                ) from error
            except grpc.aio.AioRpcError as error:
                self.broken = True
                raise EnvTransportError(
                    f"gRPC stream to {self._target} failed during {what!r}: {error.code().name} {error.details()}"
                ) from error
            except asyncio.CancelledError:
                # the caller gave up (its own timeout): the reply still due would answer the next request
                self.broken = True
                raise
        if reply is grpc.aio.EOF:
            self.broken = True
            raise EnvTransportError(f"the gRPC env server at {self._target} ended the episode stream during {what!r}")
        kind = reply.WhichOneof("frame")
        if kind == "error":
            code = refusal_code(reply.error.code, reply.error.message)
            if code == CAPACITY_REACHED:
                self.broken = True
                raise EnvAtCapacity(
                    f"env server at {self._target} is at capacity ({reply.error.message}): "
                    "use fewer rollout workers or raise the server's episode limit"
                )
            if code in ENVIRONMENT_FAILURES:
                self.broken = True
                raise lost_episode_error(self._target, code, reply.error.message)
            raise EnvRequestError(f"env server rejected {what!r} [{reply.error.code}]: {reply.error.message}")
        if kind != "observation":
            self.broken = True
            raise EnvRequestError(f"expected an observation from {self._target}, got a {kind!r} frame")
        return reply.observation

    async def reset(self, options: dict[str, Any]) -> CodingObservation:
        text = {name: str(options.get(name) or "") for name in TEXT_RESET_OPTIONS}
        request = pb.ResetRequest(
            task_id=text["task_id"], split=text["split"], sampler=text["sampler"], prefix_of=text["prefix_of"],
            origin=text["origin"], run_id=text["run_id"],
        )  # fmt: skip
        if options.get("seed") is not None:
            request.seed = int(options["seed"])
        if options.get("prefix_steps") is not None:
            request.prefix_steps = int(options["prefix_steps"])
        request.track_effects = bool(options.get("track_effects"))
        reply = await self._request(pb.ClientFrame(reset=request), "reset")
        return checked_observation(observation_from_proto(reply.observation), self._target)

    async def step(self, call: ToolCall) -> CodingObservation:
        frame = pb.ClientFrame(step=pb.ToolCall(tool=call.tool, args_json=json.dumps(call.args)))
        reply = await self._request(frame, "step")
        return checked_observation(observation_from_proto(reply.observation), self._target)

    async def close(self) -> None:
        self.broken = True
        try:
            await self._stream.write(pb.ClientFrame(close=pb.Empty()))
            await self._stream.done_writing()
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, RuntimeError):
            pass
        await self._channel.close()
