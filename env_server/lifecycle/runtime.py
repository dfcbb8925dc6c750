"""The server's lifecycle and its live episodes: start, engine recovery, health, capacity, resets, idle reaping, close.

Sandboxes come from lifecycle/provisioning.py. An episode's steps are stepping/episode.py's `Stepper`, and what
episodes leave behind goes through one StepRecorder (stepping/recorder.py).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime

from env_server.frontier_sampler import Graded, PassRates, frontier_pick
from env_server.lifecycle.engine_watch import EngineWatch, server_health
from env_server.lifecycle.prefix_replay import prefix_origin, replay_prefix
from env_server.lifecycle.provisioning import SandboxSupply
from env_server.lifecycle.reset_options import ResetOptions, ResetPlan
from env_server.observability.event_log import log_event
from env_server.observability.live_stats import LiveStats
from env_server.observability.metrics import ServerMetrics
from env_server.settings import ServerSettings
from env_server.stepping.episode import Episode, Stepper
from env_server.stepping.errors import (
    CapacityReached,
    EngineUnreachable,
    EpisodeError,
    EpisodeNotFound,
    TaskNotFound,
)
from env_server.stepping.recorder import StepRecorder
from env_server.stepping.tools import ToolResult
from env_server.task_store import Task, TaskStore, UnknownTask
from env_server.traces.store import TraceStore
from proto import PASS_REWARD
from proto.actions import ToolCall, tool_specs
from proto.health import ENGINE_RESTARTED, ENGINE_UNREACHABLE, SANDBOX_GONE, ServerHealth
from proto.observations import CodingObservation
from proto.traces import EpisodeTrace, StepTrace
from proto.transcript import prefix_history
from sandbox import Reaper, Sandbox, SandboxBackend, SandboxGone
from sandbox.lifecycle.periodic import Periodic

log = logging.getLogger(__name__)

SERVER_LABEL = "regrow.server"


def _now() -> datetime:
    return datetime.now(UTC)


class EpisodeRuntime:
    """Everything the episodes of one server share; every transport goes through it; it hands steps to the Stepper."""

    def __init__(
        self,
        settings: ServerSettings,
        store: TaskStore,
        backend: SandboxBackend,
        traces: TraceStore,
        metrics: ServerMetrics | None = None,
    ):
        self.settings, self.store, self.backend, self.traces = settings, store, backend, traces
        self.pass_rates = PassRates(self._graded)
        self.metrics = metrics or ServerMetrics()
        self.live_stats = LiveStats()
        self.recorder = StepRecorder(self.metrics, self.live_stats, traces)
        traces.report_to(self.metrics, backlog_bytes=settings.trace_backlog_mib * 1024 * 1024)
        self.server_id = uuid.uuid4().hex[:12]
        self.sandboxes = SandboxSupply(settings, store, backend, self.metrics, {SERVER_LABEL: self.server_id})
        self.reaper = Reaper(backend, interval_s=settings.reaper_interval_s)
        self.engine = EngineWatch(
            backend.ping, settings.engine_check_s, recover=self._recover, restarted=self._engine_restarted
        )
        self._missing_images: list[str] = []
        self._episodes: dict[str, Episode] = {}
        self._reserved = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._draining = threading.Event()
        self._idle_sweep = Periodic("idle-episodes", min(settings.idle_timeout_s / 4, 5.0), self._abort_idle)
        self.stepper = Stepper(settings, self.recorder, self.sandboxes.sandbox, self.environment_failure, self._release)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> EpisodeRuntime:
        """Reap orphans of earlier servers, fill the warm pools, start the idle-episode reaper and the engine watch.

        An engine that does not answer yet is no error: the server starts unhealthy and recovers when it answers.
        """
        if self.backend.ping() is None and (missing := self.store.missing_images(self.backend.image_exists)):
            raise RuntimeError(self._missing_images_message(missing))
        self.sandboxes.fill_pools()
        self.engine.start()
        log_event(
            "server.start",
            server_id=self.server_id,
            engine_up=self.engine.status.up,
            orphans_reaped=self.reaper.reaped_total,
            tasks=len(self.store.tasks),
        )
        # A second pass, as before the engine watch: a dead owner's last create may land after the first one.
        self.reaper.start(reap_now=self.engine.status.up)
        self.metrics.active_episodes.set_function(lambda: len(self._episodes))
        self.metrics.engine_up.set_function(lambda: float(self.engine.status.up))
        self.metrics.free_episode_slots.set_function(lambda: self.health().free_slots)
        self.metrics.max_episodes.set(self.settings.max_episodes)
        self._idle_sweep.start()
        return self

    def _missing_images_message(self, missing: list[str]) -> str:
        return (
            f"the engine lacks the image(s) {', '.join(missing)} of task store {self.store.root}: run "
            f"`regrow images build --tasks {self.store.root}` (it rebuilds repository images from the "
            "store's wheels), or synthesize the tasks again on this host"
        )

    def _recover(self) -> None:
        """Ready the server for an engine that answers (again): no dead pooled, stopped or orphaned container."""
        self._missing_images = self.store.missing_images(self.backend.image_exists)
        if self._missing_images:
            log.error("%s", self._missing_images_message(self._missing_images))
        dropped = self.sandboxes.drop_dead()
        stopped = self.reaper.reap_stopped({SERVER_LABEL: self.server_id})
        orphans = self.reaper.reap_once()
        self.sandboxes.refill_now()
        log_event(
            "engine.recovered", server_id=self.server_id, dropped=dropped, stopped=len(stopped), orphans=len(orphans)
        )

    def _engine_restarted(self) -> bool:
        """Whether pooled containers stopped since the last check: the engine restarted between two pings."""
        return self.sandboxes.drop_dead() > 0

    def health(self) -> ServerHealth:
        """Whether this server can start episodes now and how many, from the engine watch's last check."""
        with self._lock:
            active, reserved = len(self._episodes), self._reserved
        missing = self._missing_images_message(self._missing_images) if self._missing_images else None
        return server_health(self.engine.status, self.settings.max_episodes, active, reserved, missing)

    @property
    def stopping(self) -> bool:
        """Whether the server is going: long-lived responses (the dashboard's event stream) end when it is."""
        return self._stop.is_set() or self._draining.is_set()

    def drain(self) -> None:
        """The HTTP server is about to stop: its long-lived responses end now, so that its graceful shutdown does not
        wait out its timeout on them (sse-starlette ends them itself only on a signal to the main thread)."""
        self._draining.set()

    def close(self) -> None:
        """Graceful shutdown: abort every live episode and destroy every container this server owns."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._idle_sweep.stop()
        for episode in list(self._episodes.values()):
            self.abort(episode, "server shutdown")
        self.sandboxes.close()
        self.reaper.stop()
        self.engine.stop()
        try:
            for container in self.backend.containers_labelled({SERVER_LABEL: self.server_id}):
                self.backend.remove(container["Id"])
        except Exception as error:  # the engine is away: the next server's reaper removes what is left
            log.warning("could not list this server's containers at shutdown: %s", error)
        log_event("server.stop", server_id=self.server_id)

    def wait_warm(self, timeout: float = 120.0) -> bool:
        return self.sandboxes.wait_warm(timeout)

    # --- episodes --------------------------------------------------------------------------------

    def pick_task(self, options: ResetOptions) -> Task:
        """The task a reset plays: the one it names, or one drawn from its split by its seed and sampler."""
        sampler, run_id = options.sampler or self.settings.sampler, options.run_id
        if sampler not in ("uniform", "frontier"):
            raise TaskNotFound(f"unknown sampler {sampler!r}: use uniform or frontier")
        choose = None
        if sampler == "frontier":
            settings = self.settings

            def choose(ids: list[str], rng: random.Random) -> str:
                rates = self.pass_rates.current(run_id)
                return frontier_pick(ids, rates, rng, settings.frontier_explore_share, settings.frontier_min_seen)

        try:
            return self.store.pick(options.task_id, options.seed, options.split, self.settings.twin_rate, choose)
        except UnknownTask as error:
            raise TaskNotFound(str(error)) from None

    def _graded(self, run_id: str | None) -> dict[str, Graded]:
        """Each task's latest graded training episodes of run `run_id` (`frontier_window` at most) and their passes,
        from the trace store. An episode recorded before origins were is read as training of no run."""
        rows = self.traces.read(
            "SELECT task_id, count(*), coalesce(sum(reward >= ?), 0) FROM ("
            " SELECT task_id, reward, row_number() OVER (PARTITION BY task_id ORDER BY ended_at DESC) AS latest"
            " FROM episodes WHERE reward IS NOT NULL AND run_id IS ? AND coalesce(origin, 'training') = 'training'"
            " AND prefix_of IS NULL"
            ") WHERE latest <= ? GROUP BY task_id",
            (PASS_REWARD, run_id, self.settings.frontier_window),
        )
        return {task: Graded(graded, passed) for task, graded, passed in rows if graded}

    def plan_reset(self, options: ResetOptions) -> ResetPlan:
        """What a reset plays, decided once: its task (drawn here, when it names none), its origin and, with
        `prefix_of`, the recorded episode it starts from. Refuses a reset that cannot start (an unknown origin, task
        or sampler, a prefix that cannot be had) before anything is done about it: a bad reset must not end the
        running episode."""
        recorded: EpisodeTrace | None = None
        writes: list[StepTrace] = []
        steps = 0
        options.recorded_origin()
        if options.prefixed:
            recorded, writes, steps = prefix_origin(self.traces, options, self.settings.step_budget)
            options = replace(options, task_id=recorded.task_id)
        return ResetPlan(options, self.pick_task(options), options.recorded_origin(), recorded, writes, steps)

    def start_episode(
        self, reset: ResetOptions | ResetPlan | None = None, episode_id: str | None = None, addressable: bool = False
    ) -> Episode:
        """A new episode in a started sandbox, as `reset` plans it (or options, planned here); an addressable one
        outlives its session and is continued by id.

        With `prefix_of`, the episode plays that recorded episode's task from its workspace after `prefix_steps` steps
        (lifecycle/prefix_replay.py); PrefixRefused says why when that state cannot be restored.
        """
        plan = reset if isinstance(reset, ResetPlan) else self.plan_reset(reset or ResetOptions())
        options, task, origin, recorded, writes, steps = (
            plan.options, plan.task, plan.origin, plan.recorded, plan.writes, plan.steps
        )  # fmt: skip
        engine = self.engine.status
        if not engine.up:
            raise EngineUnreachable(
                f"the Docker engine does not answer ({engine.error}); retry once GET /health says healthy"
            )
        sandbox, rest = self._sandbox_for(task, episode_id)
        new_id = episode_id or uuid.uuid4().hex
        trace = EpisodeTrace(
            episode_id=new_id,
            task_id=task.id,
            problem_statement=task.record.problem_statement,
            tools=tool_specs(),
            started_at=_now(),
            prefix_of=options.prefix_of,
            prefix_steps=steps,
            origin=origin,
            run_id=options.run_id,
        )
        episode = Episode(
            id=new_id,
            task=task,
            sandbox=sandbox,
            trace=trace,
            addressable=addressable or episode_id is not None,
            deadline=time.monotonic() + self.settings.wall_clock_budget_s,
            steps_left=self.settings.step_budget - steps,
            engine_epoch=engine.epoch,
            prefix_history=prefix_history(recorded, steps) if recorded is not None else None,
            track_effects=bool(options.track_effects),
        )
        if rest is not None:
            episode.seeding = self.sandboxes.write_rest_soon(sandbox, rest)
        with self._lock:
            self._episodes[new_id] = episode
        self.recorder.started(episode)
        if writes:
            try:
                replay_prefix(episode, writes, self.settings)
            except BaseException as error:
                self.abort(episode, f"prefix replay failed: {error}")
                raise
        return episode

    def _sandbox_for(self, task: Task, episode_id: str | None) -> tuple[Sandbox, bytes | None]:
        """A started sandbox for `task` in a free slot (and the rest of its files to write, if any); CapacityReached
        when every slot is taken, EngineUnreachable when the engine stopped answering."""
        with self._lock:
            if len(self._episodes) + self._reserved >= self.settings.max_episodes:
                raise CapacityReached(f"all {self.settings.max_episodes} episode slots are busy; retry later")
            if episode_id is not None and (episode_id in self._episodes or self.traces.get_episode(episode_id)):
                raise EpisodeError(f"episode id {episode_id!r} is already used; choose another or omit it")
            self._reserved += 1
        try:
            return self.sandboxes.acquire(task)
        except Exception as error:
            engine = self.engine.check(force=True)
            if not engine.up:
                raise EngineUnreachable(
                    f"the Docker engine stopped answering ({engine.error}); retry once GET /health says healthy"
                ) from error
            raise
        finally:
            with self._lock:
                self._reserved -= 1

    def get(self, episode_id: str) -> Episode:
        episode = self._episodes.get(episode_id)
        if episode is None:
            raise EpisodeNotFound(f"no live episode {episode_id!r}; it ended, timed out, or never existed")
        return episode

    def live_episodes(self) -> list[Episode]:
        return list(self._episodes.values())

    def reset_observation(self, episode: Episode) -> CodingObservation:
        return CodingObservation(
            output="",
            problem_statement=episode.task.record.problem_statement,
            tools=episode.trace.tools,
            metadata={
                "episode_id": episode.id,
                "task_id": episode.task.id,
                "steps_left": episode.steps_left,
                "seconds_left": round(episode.deadline - time.monotonic(), 1),
            }
            | self._prefix_metadata(episode),
        )

    @staticmethod
    def _prefix_metadata(episode: Episode) -> dict:
        if episode.prefix_history is None:
            return {}
        trace = episode.trace
        return {"prefix": {"of": trace.prefix_of, "steps": trace.prefix_steps, "history": episode.prefix_history}}

    def take_step(self, episode: Episode, action: ToolCall) -> CodingObservation:
        """One step of `episode`: stepping/episode.py's Stepper runs it, grades at the end and records it."""
        return self.stepper.take_step(episode, action)

    def abort(self, episode: Episode, reason: str) -> None:
        """End `episode` without grading and destroy its sandbox (disconnects, timeouts, shutdown)."""
        self.stepper.abort(episode, reason)

    def environment_failure(self, episode: Episode, error: Exception) -> ToolResult | None:
        """What ended the episode when the engine or the sandbox failed under it; None when both are fine."""
        engine = self.engine.check(force=True)
        if not engine.up:
            return ToolResult(
                feedback=f"the Docker engine stopped answering ({engine.error}); this episode is over, start another "
                "once GET /health says healthy",
                error=ENGINE_UNREACHABLE,
            )
        if engine.epoch != episode.engine_epoch:
            return ToolResult(
                feedback="the Docker engine restarted and its restart stopped this episode's sandbox; this episode is "
                "over, start another",
                error=ENGINE_RESTARTED,
            )
        if isinstance(error, SandboxGone) or not self._sandbox_runs(episode):
            fate = self._sandbox_fate(episode)
            log.warning("episode %s lost its sandbox %s: %s (%s)", episode.id, episode.sandbox.id[:12], fate, error)
            why = f": {error}" if isinstance(error, SandboxGone) else ""  # ours, e.g. the task's files failed to land
            return ToolResult(feedback=f"the sandbox died ({fate}){why}; this episode is over", error=SANDBOX_GONE)
        return None

    def _sandbox_fate(self, episode: Episode) -> str:
        try:
            return self.backend.container_fate(episode.sandbox.id)
        except Exception as error:  # the engine failed this question too: say so rather than guess
            return f"its state is unknown: {error}"

    def _sandbox_runs(self, episode: Episode) -> bool:
        try:
            return self.backend.container_running(episode.sandbox.id)
        except Exception:  # the engine failed this question too: the episode's sandbox is lost to it
            return False

    def _release(self, episode: Episode) -> None:
        """An ended episode frees its slot."""
        with self._lock:
            self._episodes.pop(episode.id, None)

    def _abort_idle(self) -> None:
        cutoff = time.monotonic() - self.settings.idle_timeout_s
        for episode in self.live_episodes():
            if episode.last_activity < cutoff and not episode.lock.locked():
                self.abort(episode, f"idle for more than {self.settings.idle_timeout_s:g}s")
