"""The gRPC server: unary Reset/Step/State/Close and the bidirectional Episode stream, plus health and reflection."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from openenv.core.env_server.types import WSErrorCode
from pydantic import ValidationError

from env_server.environment import CodingEnvironment
from env_server.lifecycle.runtime import EpisodeRuntime
from env_server.stepping.errors import EpisodeError, EpisodeNotFound
from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from proto.actions import ToolCall
from proto.health import ENGINE_UNREACHABLE
from proto.observations import CodingObservation, EpisodeState

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CodingEnv"].full_name
ERROR_CODE_KEY = "regrow-error-code"
_OPENENV_CODES = {code.value for code in WSErrorCode}
_STATUS = {
    "INVALID_JSON": grpc.StatusCode.INVALID_ARGUMENT,
    "VALIDATION_ERROR": grpc.StatusCode.INVALID_ARGUMENT,
    "CAPACITY_REACHED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "UNKNOWN_TASK": grpc.StatusCode.NOT_FOUND,
    "UNKNOWN_EPISODE": grpc.StatusCode.NOT_FOUND,
    ENGINE_UNREACHABLE: grpc.StatusCode.UNAVAILABLE,
}


class FrameError(Exception):
    """A request that cannot be served; carries an OpenEnv error code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def tool_call(message: pb.ToolCall) -> ToolCall:
    """The wire ToolCall as our action model; bad JSON or a non-object is a FrameError."""
    try:
        args = json.loads(message.args_json) if message.args_json else {}
    except ValueError as error:
        raise FrameError("INVALID_JSON", f"args_json is not JSON: {error}") from None
    try:
        return ToolCall(tool=message.tool, args=args)
    except ValidationError as error:
        raise FrameError("VALIDATION_ERROR", f"invalid action: {error.errors()[0]['msg']}") from None


def observation_message(observation: CodingObservation) -> pb.Observation:
    return pb.Observation(
        output=observation.output,
        exit_code=observation.exit_code,
        truncated=observation.truncated,
        feedback=observation.feedback,
        problem_statement=observation.problem_statement,
        tools_json=json.dumps(observation.tools) if observation.tools else "",
        done=observation.done,
        reward=observation.reward,
        metadata_json=json.dumps(observation.metadata, default=str),
    )


def state_message(state: EpisodeState) -> pb.EpisodeState:
    return pb.EpisodeState(
        episode_id=state.episode_id or "",
        step_count=state.step_count,
        task_id=state.task_id or "",
        done=state.done,
        steps_left=state.steps_left or 0,
        seconds_left=state.seconds_left or 0.0,
    )


def _reset(env: CodingEnvironment, request: pb.ResetRequest) -> pb.EpisodeReply:
    observation = env.reset(
        task_id=request.task_id or None,
        seed=request.seed if request.HasField("seed") else None,
        split=request.split or None,
        sampler=request.sampler or None,
        prefix_of=request.prefix_of or None,
        prefix_steps=request.prefix_steps if request.HasField("prefix_steps") else None,
        origin=request.origin or None,
        run_id=request.run_id or None,
        track_effects=request.track_effects or None,
    )
    return pb.EpisodeReply(episode_id=env.episode_id, observation=observation_message(observation))


def _error_code(error: Exception) -> tuple[str, str]:
    if isinstance(error, FrameError):
        return error.code, str(error)
    if isinstance(error, EpisodeError):
        return error.code, str(error)
    log.exception("gRPC request failed")
    return "EXECUTION_ERROR", f"{type(error).__name__}: {error}"


class CodingEnvService(pb_grpc.CodingEnvServicer):
    """Unary calls address episodes by id; each Episode stream owns one episode like a /ws connection."""

    def __init__(self, runtime: EpisodeRuntime):
        self.runtime = runtime
        self._sessions: dict[str, CodingEnvironment] = {}
        self._lock = threading.Lock()

    def _abort(self, context: grpc.ServicerContext, error: Exception) -> NoReturn:
        code, message = _error_code(error)
        context.set_trailing_metadata(((ERROR_CODE_KEY, code),))
        context.abort(_STATUS.get(code, grpc.StatusCode.FAILED_PRECONDITION), message)
        raise AssertionError("grpc's context.abort raises")

    def _session(self, episode_id: str) -> CodingEnvironment:
        with self._lock:
            env = self._sessions.get(episode_id)
        if env is None:
            raise EpisodeNotFound(f"no gRPC episode {episode_id!r}; call Reset first")
        return env

    def Reset(self, request: pb.ResetRequest, context: grpc.ServicerContext) -> pb.EpisodeReply:
        env = CodingEnvironment(self.runtime)
        try:
            reply = _reset(env, request)
        except Exception as error:
            self._abort(context, error)
        with self._lock:
            for episode_id in [i for i, e in self._sessions.items() if e.episode is None or e.episode.done]:
                del self._sessions[episode_id]
            self._sessions[reply.episode_id] = env
        return reply

    def Step(self, request: pb.StepRequest, context: grpc.ServicerContext) -> pb.EpisodeReply:
        try:
            env = self._session(request.episode_id)
            observation = env.step(tool_call(request.action))
        except Exception as error:
            self._abort(context, error)
        if observation.done:
            with self._lock:
                self._sessions.pop(request.episode_id, None)
        return pb.EpisodeReply(episode_id=request.episode_id, observation=observation_message(observation))

    def State(self, request: pb.EpisodeRef, context: grpc.ServicerContext) -> pb.EpisodeState:
        try:
            return state_message(self._session(request.episode_id).state)
        except Exception as error:
            self._abort(context, error)

    def Close(self, request: pb.EpisodeRef, context: grpc.ServicerContext) -> pb.CloseReply:
        with self._lock:
            env = self._sessions.pop(request.episode_id, None)
        if env is not None:
            env.close()
        return pb.CloseReply(episode_id=request.episode_id, closed=env is not None)

    def Episode(
        self, request_iterator: Iterator[pb.ClientFrame], context: grpc.ServicerContext
    ) -> Iterator[pb.ServerFrame]:
        env = CodingEnvironment(self.runtime)
        # Fires on any end of the RPC, a client cancel included, so the sandbox never outlives the stream.
        context.add_callback(env.close)
        for frame in request_iterator:
            kind = frame.WhichOneof("frame")
            try:
                if kind == "reset":
                    yield pb.ServerFrame(observation=_reset(env, frame.reset))
                elif kind == "step":
                    observation = env.step(tool_call(frame.step))
                    yield pb.ServerFrame(
                        observation=pb.EpisodeReply(
                            episode_id=env.episode_id, observation=observation_message(observation)
                        )
                    )
                elif kind == "state":
                    yield pb.ServerFrame(state=state_message(env.state))
                elif kind == "close":
                    break
                else:
                    raise FrameError("UNKNOWN_TYPE", "empty frame: set one of reset, step, state, close")
            except Exception as error:
                code, message = _error_code(error)
                # Like /ws: OpenEnv's codes only; our finer code stays at the start of the message.
                code = code if code in _OPENENV_CODES else WSErrorCode.EXECUTION_ERROR.value
                yield pb.ServerFrame(error=pb.Error(code=code, message=message))
        env.close()


def start_grpc_server(runtime: EpisodeRuntime, host: str, port: int) -> tuple[grpc.Server, int]:
    """Start the CodingEnv, health and reflection services; returns the server and its bound port."""
    # Each open Episode stream holds a worker thread for its lifetime.
    workers = max(32, 2 * runtime.settings.max_episodes + 8)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc"),
        options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)],
    )
    pb_grpc.add_CodingEnvServicer_to_server(CodingEnvService(runtime), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING

    def follow_engine(up: bool) -> None:
        for name in ("", SERVICE_NAME):
            health_servicer.set(name, serving if up else not_serving)

    runtime.engine.on_change(follow_engine)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"cannot bind the gRPC port {host}:{port}; is it in use? set REGROW_SERVER_GRPC_PORT")
    server.start()
    return server, bound
