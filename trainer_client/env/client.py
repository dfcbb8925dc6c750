"""Async client for the coding environment: a pool of connections, one episode at a time on each.

`EnvClient(url)` speaks OpenEnv's WebSocket protocol (`ws://`, `http://` URLs; path `/ws`) through OpenEnv's own
async client, or gRPC (`grpc://host:port`). `async with client.episode(task_id=...) as episode:` lends a connection,
resets it and yields an `Episode`. A connection whose request was left without its reply (timed out,
cancelled by the caller, dropped) is never used again, so a late reply can never answer a later request.
A step the env could not play for reasons of its own (proto.ENVIRONMENT_FAILURES) raises `EnvEpisodeLost`.
"""

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient as OpenEnvClient
from pydantic import ValidationError
from websockets.exceptions import ConnectionClosed

from proto import ENVIRONMENT_FAILURES, CodingObservation, EpisodeState, ToolCall
from trainer_client.env.errors import (
    CAPACITY_REACHED,
    EnvAtCapacity,
    EnvEpisodeLost,
    EnvError,
    EnvRequestError,
    EnvTransportError,
    EnvUnavailable,
    checked_observation,
    lost_episode_error,
    refusal_code,
)

logger = logging.getLogger(__name__)


class EpisodeSource(Protocol):
    """What plays episodes on: one env server (`EnvClient`) or several (`EnvPool`)."""

    def episode(self, **reset_options: Any) -> AbstractAsyncContextManager["Episode"]: ...


class EnvConnection(Protocol):
    """One transport session with the server; requests on it are strictly one at a time."""

    broken: bool

    async def reset(self, options: dict[str, Any]) -> CodingObservation: ...

    async def step(self, call: ToolCall) -> CodingObservation: ...

    async def close(self) -> None: ...


def observation_from_wire(data: dict[str, Any]) -> CodingObservation:
    """An OpenEnv observation reply (`{"observation", "reward", "done", "metadata"}`) as a model."""
    fields = dict(data.get("observation") or {})
    fields["reward"] = data.get("reward")
    fields["done"] = bool(data.get("done", False))
    fields["metadata"] = data.get("metadata") or fields.get("metadata") or {}
    try:
        return CodingObservation.model_validate(fields)
    except ValidationError as error:
        raise EnvRequestError(
            f"env server sent an observation that does not fit proto.CodingObservation: {error}"
        ) from error


class ErrorFrame(Exception):
    """The server's `error` reply to a request, kept whole: its code (and counts) decide which EnvError it becomes."""

    def __init__(self, data: dict[str, Any]):
        super().__init__(data.get("message"))
        self.data = data


class CodingEnvClient(OpenEnvClient[ToolCall, CodingObservation, EpisodeState]):
    """OpenEnv's async `/ws` client, typed with proto's models, for one session.

    Its request step is ours in two ways: a request goes on the socket its session lives on (OpenEnv
    would reopen a closed one, a new session that has never seen our reset), and an error frame is
    raised whole (OpenEnv folds it into a RuntimeError's text, where the code and the counts are lost).
    """

    def _step_payload(self, action: ToolCall) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[CodingObservation]:
        observation = observation_from_wire(payload)
        return StepResult(observation, observation.reward, observation.done, observation.metadata)

    def _parse_state(self, payload: dict[str, Any]) -> EpisodeState:
        return EpisodeState.model_validate(payload)

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._ws is None:
            raise ConnectionError(f"the WebSocket to {self._ws_url} is closed; start a fresh episode")
        try:
            await self._ws.send(json.dumps(message))
        except ConnectionClosed:
            pass  # a server that refused the session has already said why: read it below
        reply = await self._receive()  # OpenEnv's: a reply not waited out drops the socket, so none arrives late
        if reply.get("type") == "error":
            raise ErrorFrame(reply.get("data") or {})
        expected = "state" if message["type"] == "state" else "observation"
        if reply.get("type") != expected:
            raise EnvRequestError(f"expected an {expected} from {self._ws_url}, got a {reply.get('type')!r} frame")
        return reply


class WebSocketConnection:
    """One OpenEnv `/ws` session on `CodingEnvClient`: a request left without its reply breaks it for good."""

    def __init__(self, client: CodingEnvClient, url: str, request_timeout: float):
        self._client = client
        self._url = url
        self._request_timeout = request_timeout
        self._lock = asyncio.Lock()
        self.broken = False

    @classmethod
    async def open(cls, url: str, open_timeout: float, request_timeout: float) -> "WebSocketConnection":
        client = CodingEnvClient(
            base_url=url.removesuffix("/ws"),  # OpenEnv adds /ws
            connect_timeout_s=open_timeout,
            message_timeout_s=None,  # each request's timeout is ours: 3.11's wait_for can swallow a cancel
            max_message_size_mb=64,
            websocket_ping_interval_s=None,  # no keepalive pings: the request timeout decides when a server is silent
            websocket_ping_timeout_s=None,
        )
        try:
            await client.connect()
        except ConnectionError as error:
            raise EnvTransportError(
                f"cannot open a WebSocket to {url}: {error.__cause__ or error}; is `regrow serve` running there?"
            ) from error
        return cls(client, url, request_timeout)

    async def _request(self, what: str, send: Callable[[], Awaitable[StepResult]]) -> CodingObservation:
        if self.broken:
            raise EnvTransportError(f"connection to {self._url} is broken; start a fresh episode")
        async with self._lock:
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that races a reply
                async with asyncio.timeout(self._request_timeout):
                    result = await send()
            except TimeoutError as error:
                self.broken = True
                raise EnvTransportError(
                    f"no reply to {what!r} from {self._url} within {self._request_timeout:.0f}s"
                ) from error
            except (ConnectionClosed, OSError) as error:
                self.broken = True
                raise EnvTransportError(f"connection to {self._url} dropped during {what!r}: {error}") from error
            except asyncio.CancelledError:
                # the caller gave up (its own timeout): the reply still due would answer the next request
                self.broken = True
                raise
            except ErrorFrame as frame:
                raise self._refusal(what, frame.data) from None
        return checked_observation(result.observation, self._url)

    def _refusal(self, what: str, data: dict[str, Any]) -> EnvError:
        """The error a refused request raises; at capacity or with the episode lost, the session is done."""
        code = refusal_code(data.get("code"), data.get("message"))
        if code == CAPACITY_REACHED:
            self.broken = True
            taken = (
                f"{data['active_sessions']} of {data['max_sessions']} sessions"
                if "max_sessions" in data
                else data.get("message")
            )
            return EnvAtCapacity(
                f"env server at {self._url} is at capacity ({taken}): use fewer rollout workers or raise the "
                "server's session limit"
            )
        if code in ENVIRONMENT_FAILURES:
            self.broken = True
            return lost_episode_error(self._url, code, data.get("message"))
        return EnvRequestError(f"env server rejected {what!r} [{data.get('code')}]: {data.get('message')}")

    async def reset(self, options: dict[str, Any]) -> CodingObservation:
        return await self._request("reset", lambda: self._client.reset(**options))

    async def step(self, call: ToolCall) -> CodingObservation:
        return await self._request("step", lambda: self._client.step(call))

    async def close(self) -> None:
        self.broken = True
        await self._client.close()  # sends OpenEnv's close frame, then closes the socket


class Episode:
    """One episode on a lent connection, from its reset observation to done."""

    def __init__(self, connection: EnvConnection, first: CodingObservation, reused: bool = False):
        self._connection = connection
        self.first = first
        self.done = first.done
        self.steps = 0
        self.reused = reused  # it ran on a pooled connection: it took no new session slot on the server
        self.kept = False  # its connection went back to the pool when it ended: the session slot stays ours

    async def step(self, call: ToolCall) -> CodingObservation:
        if self.done:
            raise EnvRequestError("this episode is done; start a new one with EnvClient.episode()")
        observation = await self._connection.step(call)
        self.steps += 1
        self.done = observation.done
        return observation


class EnvClient:
    """A pool of up to `max_connections` connections to one env server."""

    def __init__(self, url: str, max_connections: int = 8, open_timeout: float = 30.0, request_timeout: float = 900.0):
        self.url = url
        self._scheme = urlsplit(url).scheme
        if self._scheme not in ("ws", "wss", "http", "https", "grpc"):
            raise ValueError(f"env URL {url!r} must start with ws://, http:// or grpc://")
        self._open_timeout = open_timeout
        self._request_timeout = request_timeout
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[EnvConnection] = []

    @property
    def ws_url(self) -> str:
        parts = urlsplit(self.url)
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        path = parts.path.rstrip("/")
        return urlunsplit((scheme, parts.netloc, path if path.endswith("/ws") else path + "/ws", "", ""))

    async def _open(self) -> EnvConnection:
        if self._scheme == "grpc":
            from trainer_client.env.grpc_client import GrpcConnection

            return await GrpcConnection.open(self.url, self._open_timeout, self._request_timeout)
        return await WebSocketConnection.open(self.ws_url, self._open_timeout, self._request_timeout)

    async def _reset_on_pooled_or_fresh(self, options: dict[str, Any]) -> tuple[EnvConnection, CodingObservation, bool]:
        while self._idle:
            connection = self._idle.pop()
            try:
                return connection, await connection.reset(options), True
            except (EnvTransportError, EnvRequestError, EnvEpisodeLost) as error:  # stale pooled socket: a fresh one
                logger.debug("pooled connection failed on reset (%s); opening a fresh one", error)
                await _close_quietly(connection)
            except BaseException:
                await _close_quietly(connection)  # cancelled mid-reset: the socket OpenEnv dropped still closes
                raise
        try:
            connection = await self._open()
        except EnvTransportError as error:
            raise EnvUnavailable(str(error)) from error
        try:
            return connection, await connection.reset(options), False
        except (EnvTransportError, EnvEpisodeLost) as error:  # the server cannot start episodes now
            await _close_quietly(connection)
            raise EnvUnavailable(f"no episode could start on {self.url}: {error}") from error
        except BaseException:
            await _close_quietly(connection)
            raise

    @asynccontextmanager
    async def episode(self, **reset_options: Any) -> AsyncIterator[Episode]:
        """Lend a connection, reset it with `reset_options` (task_id, or seed and split), yield the episode."""
        async with self._slots:
            connection, first, reused = await self._reset_on_pooled_or_fresh(reset_options)
            episode = Episode(connection, first, reused)
            try:
                yield episode
            except BaseException:
                await _close_quietly(connection)  # an episode abandoned mid-way must not leave replies in flight
                raise
            if connection.broken or not episode.done:  # an unfinished episode would hold its sandbox
                await _close_quietly(connection)
            else:
                self._idle.append(connection)
                episode.kept = True

    @property
    def idle_connections(self) -> int:
        """Open sessions with no episode on them: each can start one even when the server reports no free slot."""
        return len(self._idle)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            await _close_quietly(connection)


async def _close_quietly(connection: EnvConnection) -> None:
    try:
        await connection.close()
    except Exception as error:  # closing is best effort; the server reaps idle sessions
        logger.debug("closing an env connection failed: %s", error)
