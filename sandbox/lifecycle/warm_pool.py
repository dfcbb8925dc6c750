"""A pool of started sandboxes, handed out at once and refilled in the background."""

from __future__ import annotations

import collections
import functools
import logging
import threading
from collections.abc import Callable, Collection, Mapping

from sandbox.lifecycle.backend_protocol import SandboxBackend
from sandbox.limits import Limits
from sandbox.runtime.sandbox_protocol import Sandbox

log = logging.getLogger(__name__)

POOL_LABEL = "regrow.pool"
MAX_BACKOFF_S = 30.0


class WarmPool:
    """Keeps `size` containers of one image started; `acquire` never hands one out twice.

    Only the pool's own filler thread adds containers, so a pool never holds more than `size`, however often it is
    woken. `prepare`, when given, runs on every container before it is handed out (in the background for pooled ones),
    for work every user of the pool would otherwise repeat; a container it fails on is destroyed.
    """

    def __init__(
        self,
        backend: SandboxBackend,
        image: str,
        size: int,
        limits: Limits | None = None,
        labels: Mapping[str, str] | None = None,
        prepare: Callable[[Sandbox], object] | None = None,
        name: str | None = None,
    ):
        if size < 0:
            raise ValueError(f"pool size must be >= 0, got {size}")
        self.backend, self.image, self.size, self._prepare = backend, image, size, prepare
        self.name = name or image
        self._create = functools.partial(
            backend.create, image, limits=limits, labels={**(labels or {}), POOL_LABEL: image}
        )
        self._ready: collections.deque[Sandbox] = collections.deque()
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._closed = threading.Event()
        self.failures = 0
        self._filler = threading.Thread(target=self._fill_forever, name=f"warm-pool:{self.name}", daemon=True)
        self._filler.start()
        self._wanted.set()

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ready(self) -> int:
        return len(self._ready)

    def ready_ids(self) -> set[str]:
        """The container ids waiting in the pool now."""
        with self._lock:
            return {sandbox.id for sandbox in self._ready}

    def acquire(self) -> Sandbox:
        """A started sandbox: from the pool when one is ready, else a fresh one."""
        if self._closed.is_set():
            raise RuntimeError("the warm pool is closed")
        with self._lock:
            sandbox = self._ready.popleft() if self._ready else None
        if sandbox is None:
            sandbox = self._create_prepared()
        self._wanted.set()
        return sandbox

    def drop(self, dead_ids: Collection[str]) -> int:
        """Destroy the pooled containers among `dead_ids` (stopped by an engine restart) and refill at once."""
        with self._lock:
            dead = [sandbox for sandbox in self._ready if sandbox.id in dead_ids]
            for sandbox in dead:
                self._ready.remove(sandbox)
        for sandbox in dead:
            sandbox.destroy()
        if dead:
            log.info("warm pool %s dropped %d dead container(s)", self.name, len(dead))
        self.refill_now()
        return len(dead)

    def refill_now(self) -> None:
        """Wake the filler, cutting short its back-off (the engine answers again)."""
        self._wanted.set()

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """Block until the pool is full (for benchmarks and start-up); False on timeout."""
        done = threading.Event()
        deadline = threading.Timer(timeout, done.set)
        deadline.start()
        try:
            while not done.is_set() and self.ready < self.size:
                done.wait(0.05)
            return self.ready >= self.size
        finally:
            deadline.cancel()

    def _create_prepared(self) -> Sandbox:
        sandbox = self._create()
        if self._prepare is not None:
            try:
                self._prepare(sandbox)
            except BaseException:
                sandbox.destroy()
                raise
        return sandbox

    def _fill_forever(self) -> None:
        backoff = 0.5
        while not self._closed.is_set():
            self._wanted.wait()
            self._wanted.clear()
            while not self._closed.is_set() and self.ready < self.size:
                try:
                    sandbox = self._create_prepared()
                except Exception as error:  # keep the filler alive; the next acquire creates directly
                    self.failures += 1
                    log.warning("warm pool %s could not start a container: %s", self.name, error)
                    # A refill_now() (the engine is back) ends the back-off early.
                    if self._wanted.wait(backoff):
                        self._wanted.clear()
                        backoff = 0.5
                    else:
                        backoff = min(backoff * 2, MAX_BACKOFF_S)
                    continue
                backoff = 0.5
                if self._closed.is_set():
                    sandbox.destroy()
                    break
                with self._lock:
                    self._ready.append(sandbox)

    def close(self) -> None:
        """Stop refilling and destroy every container still in the pool."""
        self._closed.set()
        self._wanted.set()
        self._filler.join(timeout=120)
        with self._lock:
            left = list(self._ready)
            self._ready.clear()
        for sandbox in left:
            sandbox.destroy()
