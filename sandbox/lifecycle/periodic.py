"""A function called every interval on a daemon thread until stopped: the one loop that the reaper, the engine
watch, the trace backlog and the idle-episode sweep share."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Calls `action` every `interval_s` seconds; a failing call is logged and the next one still comes."""

    def __init__(self, name: str, interval_s: float, action: Callable[[], object]):
        if interval_s <= 0:
            raise ValueError(f"{name}: the interval must be positive, got {interval_s}")
        self.name, self.interval_s, self._action = name, interval_s, action
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Periodic:
        """Start the thread (once); the first call comes one interval from now."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop calling and wait up to `timeout` for a call in progress; safe to call twice, or before `start`."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._action()
            except Exception:  # one bad pass (an engine away, a locked database) must not end the loop
                log.exception("%s: a periodic pass failed; the next one comes in %g s", self.name, self.interval_s)
