"""Sandboxes for episodes: warm pools per repository (pool key), each container readied with the install and the
workspace its tasks share, and a task's own rest of the workspace written in while the reset answers."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from env_server.lifecycle.workspace_layers import WorkspaceLayers
from env_server.observability.metrics import ServerMetrics
from env_server.settings import ServerSettings
from env_server.task_store import Task, TaskStore
from sandbox import Sandbox, SandboxBackend, SandboxError, WarmPool
from sandbox.settings import SandboxSettings


def seed(task: Task, sandbox: Sandbox) -> Sandbox:
    """Make a started container of the task's image into the task's: for a task stored as files, the editable
    install's files and then the workspace are written in, as archives, no pip run."""
    if task.as_files:
        sandbox.import_tree("/", task.install_archive())
        sandbox.import_tree("/", task.workspace_archive())
    return sandbox


class SandboxSupply:
    """Where every episode's and every grading's sandbox comes from."""

    def __init__(
        self,
        settings: ServerSettings,
        store: TaskStore,
        backend: SandboxBackend,
        metrics: ServerMetrics,
        labels: dict[str, str],
    ):
        self.settings, self.backend, self.metrics, self.labels = settings, backend, metrics, labels
        self.limits = SandboxSettings().limits()
        self.pools: dict[str, WarmPool] = {}
        self.pool_tasks = store.pool_keys()
        # Writes a task's rest into its pooled sandbox while the reset answers and the policy reads the statement.
        self._seeder = ThreadPoolExecutor(max(2, settings.max_episodes), thread_name_prefix="seed")
        self._workspace_layers: dict[str, WorkspaceLayers] = {}
        self._layers_lock = threading.Lock()

    def fill_pools(self) -> None:
        """One warm pool per pool key, in key order, until the server's total pool budget is spent."""
        budget = self.settings.warm_pool_total
        for key, tasks in self.pool_tasks.items():
            size = min(self.settings.warm_pool_per_image, budget)
            if size <= 0:
                break
            budget -= size
            pool = WarmPool(
                self.backend,
                tasks[0].record.image,
                size,
                limits=self.limits,
                labels=self.labels,
                prepare=functools.partial(self._prepare, key),
                name=key,
            )
            self.pools[key] = pool
            self.metrics.warm_pool_ready.labels(tasks[0].record.image, key).set_function(_readiness(pool))

    def drop_dead(self) -> int:
        """Destroy pooled containers that no longer run (an engine restart stopped them); returns how many."""
        pooled = {key: pool.ready_ids() for key, pool in self.pools.items()}
        if not any(pooled.values()):
            return 0
        # Listed after the pools were read: a container the pool took in since then is not judged by this list.
        running = {c["Id"] for c in self.backend.containers_labelled(self.labels) if c.get("State") == "running"}
        return sum(self.pools[key].drop(ids - running) for key, ids in pooled.items())

    def refill_now(self) -> None:
        for pool in self.pools.values():
            pool.refill_now()

    def wait_warm(self, timeout: float = 120.0) -> bool:
        return all(pool.wait_ready(timeout) for pool in self.pools.values())

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self._seeder.shutdown(wait=True, cancel_futures=True)

    def write_rest_soon(self, sandbox: Sandbox, rest: bytes) -> Future:
        return self._seeder.submit(self._write_rest, sandbox, rest)

    def _layers(self, key: str) -> WorkspaceLayers:
        """The workspace layers of a pool key, computed from its tasks' archives the first time they are needed."""
        with self._layers_lock:
            if key not in self._workspace_layers:
                tasks = self.pool_tasks[key]
                self._workspace_layers[key] = WorkspaceLayers.of(task.workspace_archive() for task in tasks)
            return self._workspace_layers[key]

    def _prepare(self, key: str, sandbox: Sandbox) -> None:
        """Ready a pooled container for any task of `key`: the install and the workspace every task of it shares."""
        first = self.pool_tasks[key][0]
        if first.as_files:  # every task of a key has the same install
            sandbox.import_tree("/", first.install_archive())
            sandbox.import_tree("/", self._layers(key).base)
            sandbox.prime_import("/")  # the reset's rest then streams into a tar that waits for it
        sandbox.prime_exec()  # and the first step's command goes to a process that runs already

    def sandbox(self, task: Task) -> Sandbox:
        """A started container of the task's image with the task's files in it."""
        sandbox, rest = self.acquire(task)
        if rest is not None:
            self._write_rest(sandbox, rest)
        return sandbox

    def acquire(self, task: Task) -> tuple[Sandbox, bytes | None]:
        """A started container of the task's image, and what is left to write into it: for a task stored as files,
        from a pool, the task's rest over the pooled base (else None: the sandbox is complete)."""
        image, pool = task.record.image, self.pools.get(task.pool_key)
        try:
            sandbox = pool.acquire() if pool else self.backend.create(image, limits=self.limits, labels=self.labels)
        except (SandboxError, OSError):
            self.metrics.sandbox_failures.labels("create").inc()
            raise
        try:
            if pool is None or not task.as_files:
                return seed(task, sandbox), None
            return sandbox, self._layers(task.pool_key).rest(task.id, task.workspace_archive())
        except BaseException:
            self.metrics.sandbox_failures.labels("create").inc()
            sandbox.destroy()
            raise

    def _write_rest(self, sandbox: Sandbox, rest: bytes) -> None:
        try:
            sandbox.import_tree("/", rest)
        except BaseException:
            self.metrics.sandbox_failures.labels("create").inc()
            sandbox.destroy()
            raise


def _readiness(pool: WarmPool) -> Callable[[], float]:
    """The gauge's reading of one pool (a closure per pool, not per loop variable)."""
    return lambda: pool.ready
