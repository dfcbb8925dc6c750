"""Streaming rollouts: N workers play episodes concurrently and queue finished GRPO groups for the trainer.

The workers run on an asyncio loop in a background thread. A group is `group_size` episodes of
the same task (same reset options). The trainer takes groups with `next_groups`, which drops any
group older than `max_staleness` policy updates. After a transport fault an episode is replayed
from a fresh reset; an env at capacity stops the stream with a clear error.
"""

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trainer_client.env.client import EnvAtCapacity, EnvClient, EnvError
from trainer_client.rollout.agent_loop import EpisodeLimits, Trajectory, TurnSampler, play_episode
from trainer_client.rollout.chat_tokens import EpisodeTokenizer

logger = logging.getLogger(__name__)


@dataclass
class StreamStats:
    """Counters of what the workers did; read by the trainer for logging."""

    episodes: int = 0
    groups_queued: int = 0
    groups_dropped_stale: int = 0
    episode_retries: int = 0
    policy_tokens: int = 0  # tokens the policy generated in all played episodes


@dataclass
class _Group:
    options: dict[str, Any]
    size: int
    episodes: list[Trajectory] = field(default_factory=list)

    @property
    def version(self) -> int:
        return min(t.policy_version for t in self.episodes)


class RolloutStream:
    """Background rollout workers feeding a queue of finished groups."""

    def __init__(
        self,
        env_url: str,
        sampler: TurnSampler,
        tokens: EpisodeTokenizer,
        limits: EpisodeLimits,
        reset_options: Iterator[dict[str, Any]],
        workers: int = 4,
        group_size: int = 4,
        max_staleness: int = 1,
        max_buffered_groups: int = 4,
        episode_retries: int = 2,
    ):
        self.sampler = sampler
        self.stats = StreamStats()
        self._env_url = env_url
        self._tokens = tokens
        self._limits = limits
        self._options = reset_options
        self._workers = workers
        self._group_size = group_size
        self._max_staleness = max_staleness
        self._episode_retries = episode_retries
        self._max_buffered_groups = max_buffered_groups
        self._ready: queue.Queue[_Group | BaseException] = queue.Queue()
        self._buffer: asyncio.Semaphore | None = None  # groups in play or waiting for the trainer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "RolloutStream":
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="rollout-workers", daemon=True)
        self._thread.start()
        started.wait()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Cancel the workers and wait for their thread; a cancel lost in a race is sent again every 10 s."""
        thread, deadline = self._thread, time.monotonic() + timeout_s
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            if self._loop is not None and self._main is not None and not self._loop.is_closed():
                try:
                    self._loop.call_soon_threadsafe(self._main.cancel)
                except RuntimeError:  # the loop closed between the check and the call
                    pass
            thread.join(timeout=min(10.0, max(0.0, deadline - time.monotonic())))
        if thread is not None and thread.is_alive():
            logger.warning("rollout workers did not stop within %.0fs; their thread is left running", timeout_s)
        self._thread = None

    def __enter__(self) -> "RolloutStream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_groups(self, count: int, policy_version: int, timeout: float | None = None) -> list[list[Trajectory]]:
        """Block until `count` groups no staler than `max_staleness` updates are ready; return them."""
        groups: list[list[Trajectory]] = []
        while len(groups) < count:
            try:
                item = self._ready.get(timeout=timeout)
            except queue.Empty as error:
                raise TimeoutError(
                    f"no rollout group finished within {timeout}s; is the env server responsive?"
                ) from error
            if isinstance(item, BaseException):
                raise item
            assert self._loop is not None and self._buffer is not None
            self._loop.call_soon_threadsafe(self._buffer.release)
            if policy_version - item.version > self._max_staleness:
                self.stats.groups_dropped_stale += 1
                continue
            groups.append(item.episodes)
        return groups

    def _run(self, started: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._buffer = asyncio.Semaphore(self._max_buffered_groups)
        self._main = loop.create_task(self._play())
        started.set()
        try:
            loop.run_until_complete(self._main)
        except asyncio.CancelledError:
            pass
        except BaseException as error:  # hand any failure to the trainer thread
            self._ready.put(error)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _play(self) -> None:
        env = EnvClient(self._env_url, max_connections=self._workers)
        jobs: asyncio.Queue[_Group] = asyncio.Queue()
        tasks = [asyncio.create_task(self._feed(jobs))]
        tasks += [asyncio.create_task(self._work(env, jobs)) for _ in range(self._workers)]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            await _cancel_all(tasks)
            await env.aclose()
            if hasattr(self.sampler, "aclose"):
                await self.sampler.aclose()

    async def _feed(self, jobs: "asyncio.Queue[_Group]") -> None:
        """Queue one episode job per group member while the buffer has room for another group."""
        assert self._buffer is not None
        for options in self._options:
            await self._buffer.acquire()
            group = _Group(options=options, size=self._group_size)
            for _ in range(self._group_size):
                await jobs.put(group)
        await asyncio.Event().wait()  # the options ran out: stay up until stopped

    async def _work(self, env: EnvClient, jobs: "asyncio.Queue[_Group]") -> None:
        while True:
            group = await jobs.get()
            trajectory = await self._play_with_retries(env, group.options)
            group.episodes.append(trajectory)
            self.stats.episodes += 1
            self.stats.policy_tokens += sum(trajectory.env_mask)
            if len(group.episodes) == group.size:
                self.stats.groups_queued += 1
                self._ready.put(group)

    async def _play_with_retries(self, env: EnvClient, options: dict[str, Any]) -> Trajectory:
        last_error: EnvError | None = None
        for _ in range(self._episode_retries + 1):
            try:
                return await play_episode(env, self.sampler, self._tokens, self._limits, options)
            except EnvAtCapacity:
                raise
            except EnvError as error:
                last_error = error
                self.stats.episode_retries += 1
                logger.warning("episode %s failed (%s); replaying it from a fresh reset", options, error)
        raise EnvError(
            f"episode {options} failed {self._episode_retries + 1} times; last error: {last_error}"
        ) from last_error


async def _cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel `tasks` and wait for them, cancelling again any that lived on: a cancel can be lost in a race with a
    reply (Python 3.11's wait_for and libraries built on it), and a worker that missed it would run forever."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)
