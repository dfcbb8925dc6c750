"""Episodes over several env servers: one `EnvClient` per server, chosen by `ServerPool`, and a health poller.

A hostname that resolves to several addresses counts as one server per address; names are resolved again
at every health read, so servers that join behind the name are found.
"""

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from trainer_client.env.client import EnvClient, Episode
from trainer_client.env.errors import EnvAtCapacity, EnvUnavailable
from trainer_client.env.server_pool import HealthRead, ServerPool, health_read, is_ip_literal, url_per_address

logger = logging.getLogger(__name__)


def health_url(url: str) -> str:
    """Where an env server's `/health` is: beside its /ws, over http(s)."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/").removesuffix("/ws")
    return urlunsplit((scheme, parts.netloc, path + "/health", "", ""))


async def read_health(http: httpx.AsyncClient, url: str, timeout_s: float) -> HealthRead:
    """One server's health: its `/health`, or for grpc:// the standard gRPC health service."""
    if urlsplit(url).scheme == "grpc":
        return await _grpc_health(url, timeout_s)
    try:
        response = await http.get(health_url(url), timeout=timeout_s)
    except httpx.HTTPError as error:
        return HealthRead(False, reason=f"no answer to /health: {type(error).__name__} {error}".strip())
    try:
        body = response.json()
    except ValueError:
        body = None
    return health_read(response.status_code, body)


async def _grpc_health(url: str, timeout_s: float) -> HealthRead:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(urlsplit(url).netloc) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.aio.AioRpcError as error:
            return HealthRead(False, reason=f"gRPC health check failed: {error.code().name}")
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    return HealthRead(serving, reason=None if serving else "gRPC health: not serving")


async def resolved_urls(urls: list[str]) -> list[str]:
    """Each URL, or one per address its hostname resolves to; a name that does not resolve stays as given."""
    loop = asyncio.get_running_loop()
    resolved: list[str] = []
    for url in urls:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if is_ip_literal(host):
            resolved.append(url)
            continue
        try:
            infos = await loop.getaddrinfo(host, parts.port, type=socket.SOCK_STREAM)
        except OSError as error:
            logger.warning("cannot resolve env server %s (%s); trying it by name", host, error)
            resolved.append(url)
            continue
        resolved += url_per_address(url, [str(info[4][0]) for info in infos])
    return list(dict.fromkeys(resolved))


class EnvPool:
    """Plays episodes on several env servers, each weighed by its free slots; implements `EpisodeSource`."""

    def __init__(
        self,
        urls: list[str],
        max_connections: int = 8,
        health_interval_s: float = 5.0,
        open_timeout: float = 30.0,
        request_timeout: float = 900.0,
    ):
        self.given_urls = list(urls)
        self.pool = ServerPool(list(urls))
        self._max_connections = max_connections
        self._health_interval_s = health_interval_s
        self._open_timeout = open_timeout
        self._request_timeout = request_timeout
        self._clients: dict[str, EnvClient] = {}
        self._http: httpx.AsyncClient | None = None
        self._poller: asyncio.Task | None = None

    async def start(self) -> "EnvPool":
        self._http = httpx.AsyncClient()
        await self.refresh()
        self._poller = asyncio.create_task(self._poll())
        return self

    async def refresh(self) -> None:
        """Resolve the names again and read every server's health."""
        assert self._http is not None, "call start() first"
        urls = await resolved_urls(self.given_urls)
        if urls != list(self.pool.servers):
            self.pool.replace_urls(urls)
            logger.info("env servers: %s", ", ".join(urls))
        timeout_s = max(1.0, min(10.0, self._health_interval_s))
        reads = await asyncio.gather(*(read_health(self._http, url, timeout_s) for url in urls))
        for url, read in zip(urls, reads, strict=True):
            was_healthy = self.pool.servers[url].healthy
            self.pool.record_health(url, read)
            if was_healthy != read.healthy:
                logger.warning("env server %s is %s", url, "back" if read.healthy else f"down: {read.reason}")

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._health_interval_s)
            try:
                await self.refresh()
            except Exception as error:  # a failed poll must not end the run; the next one tries again
                logger.warning("reading the env servers' health failed: %s", error)

    def describe(self) -> str:
        return self.pool.describe()

    def _client(self, url: str) -> EnvClient:
        if url not in self._clients:
            self._clients[url] = EnvClient(url, self._max_connections, self._open_timeout, self._request_timeout)
        return self._clients[url]

    @asynccontextmanager
    async def episode(self, **reset_options: Any) -> AsyncIterator[Episode]:
        """An episode on the server with room that the draw picks; a failed start marks that server."""
        for known, client in self._clients.items():
            self.pool.record_idle(known, client.idle_connections)
        url = self.pool.choose()
        if url is None:
            if self.pool.any_healthy:
                raise EnvAtCapacity(f"every env server is at capacity ({self.describe()}); waiting for a free slot")
            raise EnvUnavailable(f"no env server can start an episode: {self.describe()}")
        client = self._client(url)
        episode: Episode | None = None
        try:
            async with client.episode(**reset_options) as episode:
                self.pool.record_started(url, new_session=not episode.reused)
                yield episode
        except EnvAtCapacity as error:
            if episode is None:
                self.pool.record_full(url, str(error))
            raise
        except EnvUnavailable as error:
            if episode is None:
                self.pool.record_unreachable(url, str(error))
            raise
        finally:
            if episode is not None:
                self.pool.record_finished(url, session_closed=not episode.kept)
            self.pool.record_idle(url, client.idle_connections)

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with suppress(asyncio.CancelledError):
                await self._poller
        for client in self._clients.values():
            await client.aclose()
        if self._http is not None:
            await self._http.aclose()
