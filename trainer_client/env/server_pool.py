"""Which env server gets the next episode: weighed by free slots, skipping servers that stopped answering.

Pure bookkeeping, no I/O: `EnvPool` (env_pool.py) feeds it health reads and episode outcomes and asks
it where to start the next episode. A server is taken back as soon as a health read says it is healthy.
"""

import ipaddress
import json
import random
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from pydantic import ValidationError

from proto import ServerHealth

ENV_SCHEMES = ("ws", "wss", "http", "https", "grpc")


def env_urls(value: str | list[str]) -> list[str]:
    """The env server URLs of a setting: a list, a JSON list, or one string of comma-separated URLs."""
    if isinstance(value, str):
        text = value.strip()
        items = json.loads(text) if text.startswith("[") else text.split(",")
    else:
        items = [part for item in value for part in item.split(",")]
    urls = [str(item).strip().rstrip("/") for item in items if str(item).strip()]
    if not urls:
        raise ValueError("no env server given: pass --env http://host:8000 (repeat it for several servers)")
    for url in urls:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in ENV_SCHEMES or not parts.hostname or port == -1:
            raise ValueError(
                f"env URL {url!r} is not a server address: give http://host:port (WebSocket /ws) or grpc://host:port"
            )
    return list(dict.fromkeys(urls))


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def url_per_address(url: str, addresses: list[str]) -> list[str]:
    """One URL per address a hostname resolved to; IPv4 only when it has both (localhost resolves to both)."""
    unique = list(dict.fromkeys(addresses))
    v4 = [address for address in unique if ipaddress.ip_address(address).version == 4]
    chosen = v4 or unique
    if len(chosen) <= 1:
        return [url]  # one host: keep its name, for TLS and for readable logs
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    hosts = [f"[{address}]" if ":" in address else address for address in chosen]
    return [urlunsplit((parts.scheme, host + port, parts.path, parts.query, "")) for host in hosts]


@dataclass(frozen=True)
class HealthRead:
    """One read of a server's `/health`: can it start episodes, and how many more (None: not reported)."""

    healthy: bool
    free_slots: int | None = None
    reason: str | None = None


def health_read(status_code: int, body: object) -> HealthRead:
    """Parse a `/health` answer tolerantly: a 200 without free_slots (OpenEnv's own) is healthy, slots unknown."""
    fields = body if isinstance(body, dict) else {}
    if "free_slots" in fields:
        try:
            health = ServerHealth.model_validate(fields)
        except ValidationError as error:
            return HealthRead(False, reason=f"/health answered a body that is not a ServerHealth: {error}")
        if health.status == "healthy" and status_code == 200:
            return HealthRead(True, health.free_slots)
        return HealthRead(False, reason=health.reason or f"unhealthy (HTTP {status_code})")
    if status_code == 200 and fields.get("status", "healthy") == "healthy":
        return HealthRead(True)
    return HealthRead(False, reason=str(fields.get("reason") or f"/health answered HTTP {status_code}"))


@dataclass
class ServerState:
    """What the trainer knows of one server."""

    url: str
    healthy: bool = True  # until a read or a failed connect says otherwise
    free_slots: int | None = None  # None: the server's /health does not report them
    reason: str | None = None  # why it is skipped or full
    idle: int = 0  # our own open sessions there with no episode: /health counts them as taken
    started: int = 0  # episodes started on it, for the logs and the tests

    def describe(self) -> str:
        if not self.healthy:
            return f"{self.url}: down ({self.reason or 'no answer'})"
        slots = "unknown" if self.free_slots is None else str(self.free_slots)
        return f"{self.url}: healthy, {slots} free slots"


class ServerPool:
    """The servers one training run plays on, and which one takes the next episode."""

    def __init__(self, urls: list[str], rng: random.Random | None = None):
        if not urls:
            raise ValueError("a server pool needs at least one env URL")
        self.servers: dict[str, ServerState] = {url: ServerState(url) for url in urls}
        self._rng = rng or random.Random()

    def replace_urls(self, urls: list[str]) -> None:
        """Track exactly `urls` (a hostname resolved anew), keeping what is known of servers still listed."""
        self.servers = {url: self.servers.get(url) or ServerState(url) for url in urls}

    def record_health(self, url: str, read: "HealthRead") -> None:
        server = self.servers.get(url)
        if server is None:
            return
        server.healthy = read.healthy
        server.free_slots = read.free_slots if read.healthy else 0
        server.reason = read.reason

    def record_unreachable(self, url: str, reason: str) -> None:
        """A connect or reset failed: skip the server until a health read says it is back."""
        if url in self.servers:
            self.servers[url].healthy, self.servers[url].reason = False, reason

    def record_full(self, url: str, reason: str) -> None:
        """The server answered CAPACITY_REACHED: no slot there until the next health read."""
        if url in self.servers:
            self.servers[url].free_slots, self.servers[url].reason = 0, reason

    def record_idle(self, url: str, idle: int) -> None:
        if url in self.servers:
            self.servers[url].idle = idle

    def record_started(self, url: str, new_session: bool = True) -> None:
        """An episode started; on a new session it took one of the server's free slots."""
        server = self.servers.get(url)
        if server is None:
            return
        server.started += 1
        if new_session and server.free_slots is not None:
            server.free_slots = max(0, server.free_slots - 1)

    def record_finished(self, url: str, session_closed: bool = True) -> None:
        """An episode ended; closing its session gave the server a slot back (a kept one is counted as idle)."""
        server = self.servers.get(url)
        if server is not None and session_closed and server.free_slots is not None:
            server.free_slots += 1  # a health read since the start counted this session as taken

    def weights(self) -> dict[str, float]:
        """Each healthy server's share of new episodes: its free slots plus our idle sessions there; unknown slots
        weigh as the known mean."""
        healthy = [server for server in self.servers.values() if server.healthy]
        known = [server.free_slots + server.idle for server in healthy if server.free_slots is not None]
        unknown_weight = max(1.0, sum(known) / len(known)) if known else 1.0
        return {
            server.url: float(server.free_slots + server.idle) if server.free_slots is not None else unknown_weight
            for server in healthy
        }

    def choose(self) -> str | None:
        """The server for the next episode, drawn in proportion to free slots; None when no server has room."""
        weights = {url: weight for url, weight in self.weights().items() if weight > 0}
        if not weights:
            return None
        return self._rng.choices(list(weights), weights=list(weights.values()))[0]

    @property
    def any_healthy(self) -> bool:
        return any(server.healthy for server in self.servers.values())

    def describe(self) -> str:
        return "; ".join(server.describe() for server in self.servers.values())
