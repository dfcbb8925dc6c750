"""Streaming rollouts: N workers play episodes concurrently and queue finished GRPO groups for the trainer.

The workers run on an asyncio loop in a background thread and spread episodes over the env servers
(`EnvPool`). A group is `group_size` episodes of the same task (same reset options). The trainer takes
groups with `next_groups`, which drops any group older than `max_staleness` policy updates and never
waits past its deadline. Env faults are sorted into four cases:
- at capacity: back off (0.5 s doubling to `backoff_max_s`, jittered) and try again, as long as it takes;
- no episode can start (servers down): back off, and fail after `outage_s` with each server's state;
- an episode lost after it started (connection dropped, sandbox gone): replay it from a fresh reset up to
  `episode_retries` times, then drop its group;
- a bad request: stop at once.
"""

import asyncio
import logging
import queue
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer_client.env.env_pool import EnvPool
from trainer_client.env.errors import (
    EnvAtCapacity,
    EnvEpisodeLost,
    EnvError,
    EnvRequestError,
    EnvTransportError,
    EnvUnavailable,
)
from trainer_client.env.server_pool import env_urls
from trainer_client.rollout.agent_loop import EpisodeLimits, GeneratedTurn, Trajectory, TurnSampler, play_episode
from trainer_client.rollout.chat_tokens import EpisodeTokenizer
from trainer_client.rollout.prefix_planner import FALLBACK
from trainer_client.rollout.stream_settings import EnvRetries, StreamSettings
from trainer_client.rollout.token_log import TokenLog

logger = logging.getLogger(__name__)


@dataclass
class StreamStats:
    """Counters of what the workers did; read by the trainer for logging."""

    episodes: int = 0
    groups_queued: int = 0
    groups_dropped_stale: int = 0
    episode_retries: int = 0  # episodes replayed because the env lost them after they started
    groups_dropped_lost: int = 0  # groups with an episode lost more than episode_retries times
    capacity_waits: int = 0  # starts refused with CAPACITY_REACHED (or every server full)
    unavailable_waits: int = 0  # starts that found no server answering
    backoff_s: float = 0.0  # time workers slept backing off
    policy_tokens: int = 0  # tokens the policy generated in all played episodes
    turns: int = 0  # model turns in all played episodes
    reward_sum: float = 0.0  # env reward summed over all played episodes
    prefix_refused: int = 0  # prefix resets the env could not restore; their groups played the task from the start
    groups_dropped_uniform: int = 0  # groups whose rewards were all equal: no RLVR gradient, another was played
    groups_kept_uniform: int = 0  # uniform groups let through after `uniform_patience` drops in a row
    # As the policy writes them, episodes in play included: what a run shows before its first episode ends.
    turns_streamed: int = 0
    tokens_streamed: int = 0

    def counters(self) -> dict[str, float]:
        return {name: float(value) for name, value in asdict(self).items()}


@dataclass
class _Group:
    """`size` episodes of one task. A group drawn by seed is pinned to the task its first reset drew: a frontier
    draw depends on pass rates that may change between the members' resets, and a group of two tasks has no
    meaningful advantage."""

    options: dict[str, Any]
    size: int
    episodes: list[Trajectory] = field(default_factory=list)
    dropped: bool = False
    task_id: str | None = None
    _leader: bool = False
    _drawn: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def version(self) -> int:
        return min(t.policy_version for t in self.episodes)

    async def member_options(self, leading: bool) -> tuple[dict[str, Any], bool]:
        """(reset options, whether this member draws the task) for a member's next attempt: the group's own options
        for the first member (again on its retries until a reset has drawn), the drawn task for the rest."""
        if "prefix_of" in self.options:  # the prefix names the task: every member starts from it
            return {k: v for k, v in self.options.items() if k != FALLBACK}, False
        if "task_id" in self.options:
            return self.options, False
        if not self._drawn.is_set():
            if leading or not self._leader:
                self._leader = True
                return self.options, True
            await self._drawn.wait()
        return ({"task_id": self.task_id} if self.task_id else self.options), False

    def drawn(self, task_id: str | None) -> None:
        """The task the first reset drew (None when the group will not be played): the others may start."""
        if self._drawn.is_set():
            return
        self.task_id = task_id
        self._drawn.set()


class RolloutStream:
    """Background rollout workers feeding a queue of finished groups."""

    def __init__(
        self,
        env_url: str | list[str],
        sampler: TurnSampler,
        tokens: EpisodeTokenizer,
        limits: EpisodeLimits,
        reset_options: Iterator[dict[str, Any]],
        settings: StreamSettings | None = None,
        retries: EnvRetries | None = None,
        token_log: TokenLog | None = None,
    ):
        self.sampler = sampler
        self.stats = StreamStats()
        self.settings = settings or StreamSettings()
        self.retries = retries or EnvRetries()
        self._env_urls = env_urls(env_url)
        self._outage_since: float | None = None  # when the current run of failed starts began
        self._env: EnvPool | None = None
        self._tokens = tokens
        self._limits = limits
        self._options = reset_options
        self._token_log = token_log
        self._uniform_in_a_row = 0
        self._reset_tags = dict(self.settings.reset_tags)  # sent with every reset: why and by which run it is played
        self._ready: queue.Queue[_Group | BaseException] = queue.Queue()
        self._buffer: asyncio.Semaphore | None = None  # groups in play or waiting for the trainer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task | None = None
        self._thread: threading.Thread | None = None

    @property
    def env(self) -> EnvPool | None:
        """The env servers the workers play on, once started: which are up, their free slots, episodes started."""
        return self._env

    def start(self) -> "RolloutStream":
        self._env = EnvPool(self._env_urls, self.settings.workers, self.retries.health_interval_s)
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="rollout-workers", daemon=True)
        self._thread.start()
        started.wait()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Cancel the workers and wait for their thread; a cancel lost in a race is sent again every 10 s."""
        thread, deadline = self._thread, time.monotonic() + timeout_s
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            self.stop_playing()
            thread.join(timeout=min(10.0, max(0.0, deadline - time.monotonic())))
        if thread is not None and thread.is_alive():
            logger.warning("rollout workers did not stop within %.0fs; their thread is left running", timeout_s)
        self._thread = None

    def stop_playing(self) -> None:
        """Cancel the workers without waiting for them: the trainer has taken every group it will train on."""
        if self._loop is not None and self._main is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._main.cancel)
            except RuntimeError:  # the loop closed between the check and the call
                pass

    def __enter__(self) -> "RolloutStream":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_groups(self, count: int, policy_version: int, timeout: float = 1800.0) -> list[list[Trajectory]]:
        """Wait until `count` groups no staler than `max_staleness` updates are ready, at most `timeout` s."""
        deadline = time.monotonic() + timeout
        groups: list[list[Trajectory]] = []
        while len(groups) < count:
            try:
                item = self._ready.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty as error:
                servers = self._env.describe() if self._env is not None else ", ".join(self._env_urls)
                raise TimeoutError(
                    f"only {len(groups)} of {count} rollout groups finished within {timeout:g}s "
                    f"(env servers: {servers}; {self.stats.capacity_waits} capacity waits, "
                    f"{self.stats.backoff_s:.0f}s backing off); free env slots or raise --episode-timeout-s"
                ) from error
            if isinstance(item, BaseException):
                raise item
            assert self._loop is not None and self._buffer is not None
            self._loop.call_soon_threadsafe(self._buffer.release)
            if policy_version - item.version > self.settings.max_staleness:
                self.stats.groups_dropped_stale += 1
                continue
            groups.append(item.episodes)
        return groups

    def _run(self, started: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._buffer = asyncio.Semaphore(self.settings.max_buffered_groups)
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
        env = self._env
        assert env is not None
        jobs: asyncio.Queue[_Group] = asyncio.Queue()
        tasks: list[asyncio.Task] = []
        try:
            await env.start()
            tasks.append(asyncio.create_task(self._feed(jobs)))
            tasks += [asyncio.create_task(self._work(env, jobs)) for _ in range(self.settings.workers)]
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
            group = _Group(options=options, size=self.settings.group_size)
            for _ in range(self.settings.group_size):
                await jobs.put(group)
        await asyncio.Event().wait()  # the options ran out: stay up until stopped

    async def _work(self, env: EnvPool, jobs: "asyncio.Queue[_Group]") -> None:
        assert self._buffer is not None
        while True:
            group = await jobs.get()
            if group.dropped:
                continue
            trajectory = await self._play_with_retries(env, group)
            if trajectory is None and not group.dropped:
                group.drawn(None)  # members waiting for the task go on, and see the group dropped
                group.dropped = True
                self.stats.groups_dropped_lost += 1
                self._buffer.release()  # the group will never reach the trainer
            if trajectory is None or group.dropped:
                continue
            if self._token_log is not None:  # before the group can reach the trainer, which may stop the stream then
                await asyncio.to_thread(self._token_log.record, trajectory)  # file I/O off the workers' loop
            group.episodes.append(trajectory)
            self.stats.episodes += 1
            self.stats.policy_tokens += sum(trajectory.env_mask)
            self.stats.turns += len(trajectory.turns)
            self.stats.reward_sum += trajectory.reward
            if len(group.episodes) == group.size:
                if self._dropped_as_uniform(group):
                    self._buffer.release()  # the feeder plays another group in its place
                    continue
                self.stats.groups_queued += 1
                self._ready.put(group)

    def _dropped_as_uniform(self, group: _Group) -> bool:
        """Whether a finished group is dropped because its rewards are all equal: its GRPO advantages are all 0, yet
        Dr.GRPO's denominator would count its tokens. After `uniform_patience` drops in a row one is kept, so that a
        policy that fails (or passes) every task still takes steps."""
        rewards = [t.reward for t in group.episodes]
        if not self.settings.drop_uniform or max(rewards) - min(rewards) > 1e-9:
            self._uniform_in_a_row = 0
            return False
        if self._uniform_in_a_row >= self.settings.uniform_patience:
            self._uniform_in_a_row = 0
            self.stats.groups_kept_uniform += 1
            logger.warning(
                "%d groups in a row had equal rewards (last: %g); keeping this one so that training goes on",
                self.settings.uniform_patience + 1,
                rewards[0],
            )
            return False
        self._uniform_in_a_row += 1
        self.stats.groups_dropped_uniform += 1
        return True

    def _streamed(self, turn: GeneratedTurn) -> None:
        self.stats.turns_streamed += 1
        self.stats.tokens_streamed += len(turn.ids)

    async def _play_with_retries(self, env: EnvPool, group: _Group) -> Trajectory | None:
        """The episode played to its end, or None when the env lost it more than `episode_retries` times."""
        first_delay = min(0.5, self.retries.backoff_max_s)
        replays, capacity_delay, outage_delay = 0, first_delay, first_delay
        leading = False
        while True:
            options, leading = await group.member_options(leading)
            if group.dropped:
                return None
            try:
                tagged = {**self._reset_tags, **options}
                trajectory = await play_episode(
                    env, self.sampler, self._tokens, self._limits, tagged, on_reset=group.drawn, on_turn=self._streamed
                )
            except EnvAtCapacity as error:
                self.stats.capacity_waits += 1
                self._outage_since = None  # a server answered: not an outage
                log = logger.info if capacity_delay == first_delay else logger.debug  # once per wait, not per try
                log("env at capacity (%s); backing off", error)
                capacity_delay = await self._back_off(capacity_delay)
            except EnvUnavailable as error:
                self.stats.unavailable_waits += 1
                now = time.monotonic()
                self._outage_since = self._outage_since or now
                if now - self._outage_since > self.retries.outage_s:
                    raise EnvError(
                        f"no env server could start an episode for {now - self._outage_since:.0f}s "
                        f"(--env-outage-s {self.retries.outage_s:g}): {env.describe()}; start them (`regrow serve`) "
                        "or check --env"
                    ) from error
                log = logger.warning if outage_delay == first_delay else logger.debug
                log("no episode could start (%s); backing off up to --env-outage-s", error)
                outage_delay = await self._back_off(outage_delay)
            except EnvRequestError as error:
                if "prefix_of" not in options:
                    raise
                # The env cannot restore that prefix (a command changed files, say): the group plays the task plainly.
                logger.info("prefix reset %s refused (%s); the group plays its task from the start", options, error)
                self.stats.prefix_refused += 1
                if "prefix_of" in group.options:  # another member may have fallen back already
                    group.options = group.options.get(FALLBACK) or {}
            except (EnvEpisodeLost, EnvTransportError) as error:  # lost after it started
                self._outage_since = None
                if replays >= self.retries.episode_retries:
                    logger.warning(
                        "episode %s lost %d times (last: %s); dropping its group", options, replays + 1, error
                    )
                    return None
                replays += 1
                self.stats.episode_retries += 1
                logger.warning("episode %s lost (%s); replaying it from a fresh reset", options, error)
            else:
                self._outage_since = None
                return trajectory

    async def _back_off(self, delay: float) -> float:
        """Sleep about `delay` seconds (jittered, so workers do not retry in step); return the next delay."""
        slept = delay * random.uniform(0.5, 1.0)
        await asyncio.sleep(slept)
        self.stats.backoff_s += slept
        return min(delay * 2, self.retries.backoff_max_s)


async def _cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel `tasks` and wait for them, cancelling again any that lived on: a cancel can be lost in a race with a
    reply (Python 3.11's wait_for and libraries built on it), and a worker that missed it would run forever."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)
