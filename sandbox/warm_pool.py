"""A pool of started sandboxes, handed out at once and refilled in the background."""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Mapping

from sandbox.docker_backend import DockerBackend, Sandbox
from sandbox.limits import Hardening, Limits

log = logging.getLogger(__name__)

POOL_LABEL = "regrow.pool"


class WarmPool:
    """Keeps `size` containers of one image started; `acquire` never hands one out twice.

    `prepare`, when given, runs on every container before it is handed out (in the background for pooled ones), for
    work every user of the pool would otherwise repeat; a container it fails on is destroyed.
    """

    def __init__(
        self,
        backend: DockerBackend,
        image: str,
        size: int,
        limits: Limits | None = None,
        labels: Mapping[str, str] | None = None,
        hardening: Hardening | None = None,
        workdir: str | None = None,
        prepare: Callable[[Sandbox], object] | None = None,
        name: str | None = None,
    ):
        if size < 0:
            raise ValueError(f"pool size must be >= 0, got {size}")
        self.backend, self.image, self.size, self._prepare = backend, image, size, prepare
        self.name = name or image
        self._create = functools.partial(
            backend.create,
            image,
            limits=limits,
            labels={**(labels or {}), POOL_LABEL: image},
            hardening=hardening,
            workdir=workdir,
        )
        self._ready: queue.SimpleQueue[Sandbox] = queue.SimpleQueue()
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
        return self._ready.qsize()

    def acquire(self) -> Sandbox:
        """A started sandbox: from the pool when one is ready, else a fresh one."""
        if self._closed.is_set():
            raise RuntimeError("the warm pool is closed")
        try:
            sandbox = self._ready.get_nowait()
        except queue.Empty:
            sandbox = self._create_prepared()
        self._wanted.set()
        return sandbox

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
            while not self._closed.is_set() and self._ready.qsize() < self.size:
                try:
                    sandbox = self._create_prepared()
                except Exception as error:  # keep the filler alive; the next acquire creates directly
                    self.failures += 1
                    log.warning("warm pool %s could not start a container: %s", self.name, error)
                    self._closed.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                backoff = 0.5
                if self._closed.is_set():
                    sandbox.destroy()
                    break
                self._ready.put(sandbox)

    def close(self) -> None:
        """Stop refilling and destroy every container still in the pool."""
        self._closed.set()
        self._wanted.set()
        self._filler.join(timeout=120)
        while True:
            try:
                self._ready.get_nowait().destroy()
            except queue.Empty:
                break
