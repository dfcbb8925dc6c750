"""A Docker API socket proxy: a sandbox's owner reaches the engine only through the endpoints regrow uses.

One request per client connection: the proxy reads one request, checks it (docker_proxy_policy), forwards
it on a fresh connection to the engine with `Connection: close`, relays the answer and closes. No further
client byte is ever forwarded, except into the raw stream of an exec the engine has switched to (101).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11
from pydantic_settings import BaseSettings, SettingsConfigDict

from sandbox.lifecycle.owner import MANAGED_LABEL
from sandbox.proxy.policy import (
    Refused,
    Route,
    Scope,
    check_container_create,
    check_exec_create,
    field,
    refusal,
    route_request,
)
from sandbox.proxy.relay import (
    Answer,
    EngineDown,
    answer,
    linger,
    next_event,
    read_response,
    relay_until_done,
    relay_upgrade,
    upstream_request,
)

log = logging.getLogger(__name__)

_CACHE_LIMIT = 100_000


class ProxySettings(BaseSettings):
    """Where the proxy listens, the engine it guards, and its bounds (env prefix REGROW_PROXY_)."""

    model_config = SettingsConfigDict(env_prefix="REGROW_PROXY_")

    listen: str = "tcp://127.0.0.1:2375"  # or unix:///path/to/proxy.sock
    engine: str = "unix:///var/run/docker.sock"
    max_head_kib: int = 32
    max_body_mib: int = 32  # above the sandbox file limit: archive uploads are buffered whole
    head_timeout_s: float = 10.0
    body_timeout_s: float = 120.0
    engine_timeout_s: float = 30.0  # connecting to the engine, and the proxy's own inspects


class DockerProxy:
    """The asyncio server. `await start()`, then `await close()`; one task per client connection."""

    def __init__(self, settings: ProxySettings):
        if not settings.engine.startswith("unix://"):
            raise ValueError(
                f"the engine must be a unix socket such as unix:///var/run/docker.sock, got {settings.engine!r}"
            )
        self.settings = settings
        self.engine_path = settings.engine.removeprefix("unix://")
        self._managed: set[str] = set()  # full ids of containers labelled regrow.managed=1 (labels never change)
        self._exec_owner: dict[str, str] = {}  # exec id -> its managed container
        self._connections: set[asyncio.Task] = set()
        self._server: asyncio.AbstractServer | None = None
        self.address = ""  # where it listens once started, with the real port when asked for port 0

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        where = urlsplit(self.settings.listen)
        if where.scheme == "tcp" and where.hostname and where.port is not None:
            self._server = await asyncio.start_server(self._on_client, where.hostname, where.port, reuse_address=True)
        elif where.scheme == "unix" and where.path:
            self._server = await asyncio.start_unix_server(self._on_client, where.path)
        else:
            raise ValueError(f"listen on tcp://HOST:PORT or unix:///PATH, got {self.settings.listen!r}")
        name = self._server.sockets[0].getsockname()
        self.address = f"unix://{name}" if isinstance(name, str) else f"tcp://{name[0]}:{name[1]}"

    async def close(self) -> None:
        """Stop listening and end every open connection."""
        if self._server is None:
            return
        self._server.close()
        await asyncio.sleep(0)  # connections accepted just before now register themselves first
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
        if self.address.startswith("unix://"):
            with contextlib.suppress(OSError):
                os.unlink(self.address.removeprefix("unix://"))

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            if await self._serve_one(reader, writer):
                await linger(reader, writer)
        except ConnectionError:
            pass  # the client went away; nothing to tell it
        except Exception:
            log.exception("regrow docker proxy: unexpected failure while serving a request")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve the connection's one request; True when it was refused and the client may still be sending."""
        client = h11.Connection(h11.SERVER, max_incomplete_event_size=self.settings.max_head_kib * 1024)
        method, path = "", ""
        try:
            try:
                async with asyncio.timeout(self.settings.head_timeout_s):
                    request = await next_event(client, reader)
            except TimeoutError:
                raise Refused(
                    f"regrow docker proxy refused a request: no complete request head within "
                    f"{self.settings.head_timeout_s:g}s; send the head at once",
                    408,
                ) from None
            if not isinstance(request, h11.Request):
                return False  # the client closed without a request
            head_bytes = len(request.target) + sum(len(name) + len(value) + 4 for name, value in request.headers)
            if head_bytes > self.settings.max_head_kib * 1024:  # h11 bounds only a head that is still incomplete
                raise h11.RemoteProtocolError("request head too long", error_status_hint=431)
            method, target = request.method.decode("latin-1"), request.target.decode("latin-1")
            path = target.partition("?")[0][:200]
            route = route_request(method, target)
            decision = await self._decide(route, await self._read_body(client, reader, request, route))
            if isinstance(decision, Answer):
                await answer(writer, method, decision)
            else:
                await self._forward(route, decision, request, client, reader, writer)
            return False
        except h11.RemoteProtocolError as error:
            if error.error_status_hint == 431:
                why = f"the request head is over {self.settings.max_head_kib} KiB; raise REGROW_PROXY_MAX_HEAD_KIB"
            else:
                why = f"malformed HTTP ({error}); send one well-formed HTTP/1.1 request"
            what = f"{method} {path}" if method else "a request"
            refused = Refused(f"regrow docker proxy refused {what}: {why}", error.error_status_hint)
        except Refused as error:
            refused = error
        except EngineDown as error:
            log.error("%s", error)
            await answer(writer, method, Answer(502, {"message": str(error)}))
            return True
        log.warning("%s", refused)
        await answer(writer, method, Answer(refused.status, {"message": str(refused)}))
        return True

    async def _read_body(
        self, client: h11.Connection, reader: asyncio.StreamReader, request: h11.Request, route: Route
    ) -> bytes:
        headers = dict(request.headers)
        if b"content-length" in headers and b"transfer-encoding" in headers:
            raise refusal(
                route.method, route.path, "both Content-Length and Transfer-Encoding are set", "send one", 400
            )
        limit = self.settings.max_body_mib * 1024 * 1024
        too_large = refusal(
            route.method,
            route.path,
            f"the body is over {self.settings.max_body_mib} MiB",
            "raise REGROW_PROXY_MAX_BODY_MIB or send less",
            413,
        )
        if int(headers.get(b"content-length", 0)) > limit:
            raise too_large
        body = bytearray()

        async def collect() -> None:
            while not isinstance(event := await next_event(client, reader), h11.EndOfMessage):
                if event is h11.PAUSED:
                    raise refusal(route.method, route.path, "the request did not end", "send one whole request", 400)
                if isinstance(event, h11.Data):
                    body.extend(event.data)
                    if len(body) > limit:
                        raise too_large

        try:
            async with asyncio.timeout(self.settings.body_timeout_s):
                await collect()
        except TimeoutError:
            raise refusal(
                route.method,
                route.path,
                f"the body did not arrive within {self.settings.body_timeout_s:g}s",
                "send it faster or raise REGROW_PROXY_BODY_TIMEOUT_S",
                408,
            ) from None
        return bytes(body)

    async def check_engine(self) -> None:
        """Log (and raise EngineDown) when the engine does not answer its ping; the proxy keeps serving 502s."""
        try:
            status, _ = await self._engine_json("/_ping")
        except EngineDown as error:
            log.warning("%s", error)
            raise
        if status != 200:
            log.warning("the Docker engine at %s answered %d to /_ping", self.settings.engine, status)

    async def _decide(self, route: Route, body: bytes) -> Forward | Answer:
        """What to send the engine (targets rewritten to full ids), or the proxy's own answer; raises Refused."""
        if route.body == "container_create":
            body = check_container_create(route.method, route.path, body)
        elif route.body == "exec_create":
            body = check_exec_create(route.method, route.path, body)
        if route.scope is Scope.NONE or route.ref is None:
            return Forward(route.target(), body, None)
        container_ref = route.ref
        if route.scope is Scope.EXEC:
            if route.ref in self._exec_owner:
                return Forward(route.target(), body, self._exec_owner[route.ref])
            status, info = await self._engine_json(f"/exec/{route.ref}/json")
            if status == 404:
                return Answer(404, {"message": f"No such exec instance: {route.ref}"})
            owner = field(info, "ContainerID")
            if status != 200 or not isinstance(owner, str):
                raise EngineDown(
                    f"regrow docker proxy: the engine answered {status} to inspecting exec {route.ref[:12]}"
                )
            container_ref = owner
        found = await self._container(container_ref)
        if found is None:
            return Answer(404, {"message": f"No such container: {container_ref}"})
        container_id, managed, info = found
        if managed and route.scope is Scope.EXEC:
            _remember(self._exec_owner, route.ref, container_id)
            return Forward(route.target(), body, container_id)
        if managed:
            return Forward(route.target(container_id), body, container_id)
        if route.foreign_state_only:
            # The reaper asks whether an owner's container still runs; that is all an unmanaged container reveals.
            state = field(info, "State") or {}
            return Answer(
                200,
                {"Id": container_id, "State": {"Status": field(state, "Status"), "Running": field(state, "Running")}},
            )
        raise refusal(
            route.method,
            route.path,
            f"container {container_ref[:12]} does not carry the label {MANAGED_LABEL}=1",
            "the proxy only touches regrow's sandboxes; create them with DockerBackend.create",
        )

    async def _container(self, ref: str) -> tuple[str, bool, dict] | None:
        """(full id, managed, inspect data) of a container reference; None when the engine knows no such container."""
        if ref in self._managed:
            return ref, True, {}
        if not ref:
            return None
        status, info = await self._engine_json(f"/containers/{ref}/json")
        if status == 404:
            return None
        if status != 200 or not isinstance(info.get("Id"), str):
            raise EngineDown(
                f"regrow docker proxy: the engine answered {status} to inspecting {ref[:12]}: {info.get('message')}"
            )
        labels = field(field(info, "Config"), "Labels") or {}
        managed = isinstance(labels, dict) and labels.get(MANAGED_LABEL) == "1"
        if managed:
            _remember(self._managed, info["Id"])
        return info["Id"], managed, info

    async def _engine_json(self, path: str) -> tuple[int, dict]:
        """Status and JSON object of the proxy's own GET to the engine."""
        upstream_reader, upstream_writer = await self._open_engine()
        try:
            upstream_writer.write(f"GET {path} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n".encode())
            async with asyncio.timeout(self.settings.engine_timeout_s):
                status, _, body = await read_response(upstream_reader, "GET")
        except TimeoutError:
            raise EngineDown(
                f"regrow docker proxy: the engine did not answer GET {path} within "
                f"{self.settings.engine_timeout_s:g}s; is it overloaded? (`docker info`)"
            ) from None
        finally:
            upstream_writer.close()
        with contextlib.suppress(ValueError):
            info = json.loads(body or b"{}")
            return status, info if isinstance(info, dict) else {}
        return status, {}

    async def _open_engine(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(self.settings.engine_timeout_s):
                return await asyncio.open_unix_connection(self.engine_path)
        except (OSError, TimeoutError) as error:
            raise EngineDown(
                f"regrow docker proxy cannot reach the Docker engine at {self.settings.engine} ({error!r}): is the "
                "daemon "
                "running, is its socket mounted into the proxy, and does the proxy run in the socket's group? (`docker "
                "info`)"
            ) from None

    async def _forward(
        self,
        route: Route,
        forward: Forward,
        request: h11.Request,
        client: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        upstream_reader, upstream_writer = await self._open_engine()
        try:
            upstream_writer.write(
                upstream_request(route.method, forward.target, forward.body, request.headers, route.upgrade)
            )
            if route.method == "DELETE" and forward.container_id:
                self._managed.discard(forward.container_id)
            if route.upgrade:
                await relay_upgrade(client, reader, writer, upstream_reader, upstream_writer)
            elif route.body == "exec_create":
                _, raw, body = await read_response(upstream_reader, route.method)
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    _remember(self._exec_owner, json.loads(body)["Id"], forward.container_id)
                writer.write(raw)
                await writer.drain()
            else:
                await relay_until_done(upstream_reader, upstream_writer, reader, writer)
        finally:
            upstream_writer.close()


@dataclass(frozen=True)
class Forward:
    """A checked request, as it goes to the engine."""

    target: str
    body: bytes
    container_id: str | None  # the managed container it touches


def _remember(cache: set | dict, key: str, value: str | None = None) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    if isinstance(cache, dict):
        cache[key] = value
    else:
        cache.add(key)


async def serve(settings: ProxySettings) -> None:
    """Run the proxy until SIGTERM or SIGINT."""
    proxy = DockerProxy(settings)
    await proxy.start()
    with contextlib.suppress(EngineDown):
        await proxy.check_engine()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("regrow docker proxy listening on %s, guarding %s", proxy.address, settings.engine)
    try:
        await stop.wait()
    finally:
        await proxy.close()
        log.info("regrow docker proxy stopped")
