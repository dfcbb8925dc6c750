"""Whether the Docker engine answers, learnt by a ping every REGROW_SERVER_ENGINE_CHECK_S, never per request.

A watch thread pings on that interval; a step that failed asks for a check at once. When the
engine answers again after an outage, or its restart shows in the pool's stopped containers, the watch runs the
server's recovery before it reports the engine up, and counts one more engine epoch: an episode begun in an earlier
epoch lost its sandbox to the engine.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from proto.health import ServerHealth
from sandbox.lifecycle.periodic import Periodic

log = logging.getLogger(__name__)

# While the engine is away, failed steps ping no more than this often.
FORCED_CHECK_GAP_S = 1.0


@dataclass(frozen=True)
class EngineStatus:
    """What the last check learnt: whether the engine answered, its error if not, and the engine epoch."""

    up: bool
    error: str | None = None
    epoch: int = 0


class EngineWatch:
    """Pings the engine on an interval, tells listeners when it goes and comes back, and recovers on its return.

    `ping` returns None when the engine answers, else its error. `restarted` says whether the engine restarted
    unnoticed between two pings (the pool's containers stopped). `recover` readies the server for the engine again.
    """

    def __init__(
        self,
        ping: Callable[[], str | None],
        interval_s: float,
        recover: Callable[[], None],
        restarted: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._ping, self.interval_s, self._recover, self._restarted, self._clock = (
            ping,
            interval_s,
            recover,
            restarted,
            clock,
        )
        self._status = EngineStatus(up=False, error="not checked yet")
        self._checked = False
        self._last_check = float("-inf")
        self._check_lock = threading.Lock()
        self._listeners: list[Callable[[bool], None]] = []
        self._loop = Periodic("engine-watch", interval_s, self.check)
        self.pings = 0

    @property
    def status(self) -> EngineStatus:
        """The last check's answer, without asking the engine."""
        return self._status

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Call `listener(up)` now and whenever the engine goes away or comes back."""
        self._listeners.append(listener)
        listener(self._status.up)

    def check(self, force: bool = False) -> EngineStatus:
        """Ping unless the last ping is younger than the interval.

        A forced check (a step failed) pings unless the engine was found away less than a second ago: an engine that
        answered a moment ago may have died since, and that is what the failed step must learn.
        """
        with self._check_lock:
            gap = (0.0 if self._status.up else FORCED_CHECK_GAP_S) if force else self.interval_s
            if self._clock() - self._last_check < gap:
                return self._status
            self._last_check = self._clock()
            self.pings += 1
            was, first = self._status, not self._checked
            self._checked = True
            error = self._ping()
            if error is not None and was.up:
                # One lost ping (a loaded engine, a busy proxy) must not end episodes: ask once more before saying so.
                error = self._ping()
            if error is not None:
                if was.up or first:
                    log.warning("Docker engine unreachable: %s", error)
                self._set(EngineStatus(up=False, error=error, epoch=was.epoch))
                return self._status
            try:
                if was.up and not self._restarted():
                    return was
                if was.up:
                    log.warning("Docker engine restarted between two checks: the pool's containers stopped")
                self._recover()
            except Exception as failure:  # retried at the next check; until then the engine counts as away
                log.warning("recovery after the engine's return failed, retried at the next check: %s", failure)
                self._set(EngineStatus(up=False, error=f"it answers, but recovery failed: {failure}", epoch=was.epoch))
                return self._status
            self._set(EngineStatus(up=True, epoch=was.epoch if first else was.epoch + 1))
            log.info("Docker engine answers%s", "" if first else " again; recovered")
            return self._status

    def _set(self, status: EngineStatus) -> None:
        changed = status.up != self._status.up
        self._status = status
        if changed:
            for listener in self._listeners:
                listener(status.up)

    def start(self) -> EngineWatch:
        """Check once now, then on every interval in a background thread."""
        self.check()
        self._loop.start()
        return self

    def stop(self) -> None:
        self._loop.stop()


def _regrow_version() -> str | None:
    try:
        return importlib.metadata.version("regrow")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return None


VERSION = _regrow_version()


def server_health(
    engine: EngineStatus, max_episodes: int, active: int, reserved: int, blocker: str | None = None
) -> ServerHealth:
    """GET /health's answer: unhealthy with no free slot while the engine is away or `blocker` says what is missing."""
    reason = f"engine unreachable: {engine.error}" if not engine.up else blocker
    return ServerHealth(
        status="unhealthy" if reason else "healthy",
        reason=reason,
        engine_up=engine.up,
        free_slots=0 if reason else max(0, max_episodes - active - reserved),
        max_episodes=max_episodes,
        active_episodes=active,
        version=VERSION,
    )
