"""Live episodes of one server: capacity, budgets, steps, grading on submit, idle reaping.

Sandboxes come from env_server.lifecycle.provisioning; the errors the API answers are env_server.stepping.errors.
"""

from __future__ import annotations

import json
import logging
import tarfile
import threading
import time
import uuid
from datetime import UTC, datetime

from pydantic import ValidationError

from env_server.grading import PristineCache, failing_summary, grade
from env_server.lifecycle.engine_watch import EngineWatch, server_health
from env_server.lifecycle.provisioning import SandboxSupply
from env_server.observability.event_log import log_event
from env_server.observability.live_stats import LiveStats
from env_server.observability.metrics import ServerMetrics
from env_server.settings import ServerSettings
from env_server.stepping.episode import Episode, has_invalid_text, is_terminal
from env_server.stepping.errors import (
    CapacityReached,
    EngineUnreachable,
    EpisodeError,
    EpisodeNotFound,
    EpisodeOver,
    TaskNotFound,
)
from env_server.stepping.tools import ToolResult, call_tool
from env_server.task_store import Task, TaskStore, UnknownTask
from env_server.traces.store import TraceStore
from proto.actions import TOOL_ARGS, ToolCall, tool_specs
from proto.health import ENGINE_RESTARTED, ENGINE_UNREACHABLE, SANDBOX_GONE, ServerHealth
from proto.observations import CodingObservation, RewardDetails
from proto.traces import EpisodeTrace, StepTrace
from sandbox import DockerBackend, Reaper, SandboxError, SandboxGone

log = logging.getLogger(__name__)

SERVER_LABEL = "regrow.server"


def _joined(*hints: str | None) -> str | None:
    return "; ".join(h for h in hints if h) or None


def _now() -> datetime:
    return datetime.now(UTC)


class EpisodeRuntime:
    """Everything the episodes of one server share; every transport goes through it."""

    def __init__(
        self,
        settings: ServerSettings,
        store: TaskStore,
        backend: DockerBackend,
        traces: TraceStore,
        metrics: ServerMetrics | None = None,
    ):
        self.settings, self.store, self.backend, self.traces = settings, store, backend, traces
        self.metrics = metrics or ServerMetrics()
        self.live_stats = LiveStats()
        traces.report_to(self.metrics, backlog_bytes=settings.trace_backlog_mib * 1024 * 1024)
        self.server_id = uuid.uuid4().hex[:12]
        self.sandboxes = SandboxSupply(settings, store, backend, self.metrics, {SERVER_LABEL: self.server_id})
        self.pristine = PristineCache()
        self.reaper = Reaper(backend, interval_s=settings.reaper_interval_s)
        self.engine = EngineWatch(
            backend.ping, settings.engine_check_s, recover=self._recover, restarted=self._engine_restarted
        )
        self._missing_images: list[str] = []
        self._episodes: dict[str, Episode] = {}
        self._reserved = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._idle_thread = threading.Thread(target=self._reap_idle_forever, name="idle-episodes", daemon=True)

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
        self._idle_thread.start()
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
        return self._stop.is_set()

    def close(self) -> None:
        """Graceful shutdown: abort every live episode and destroy every container this server owns."""
        if self._stop.is_set():
            return
        self._stop.set()
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

    def pick_task(self, task_id: str | None, seed: int | None, split: str | None) -> Task:
        try:
            return self.store.pick(task_id, seed, split, self.settings.twin_rate)
        except UnknownTask as error:
            raise TaskNotFound(str(error)) from None

    def start_episode(
        self,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        episode_id: str | None = None,
        addressable: bool = False,
    ) -> Episode:
        """A new episode in a started sandbox; an addressable one outlives its session and is continued by id."""
        task = self.pick_task(task_id, seed, split)
        engine = self.engine.status
        if not engine.up:
            raise EngineUnreachable(
                f"the Docker engine does not answer ({engine.error}); retry once GET /health says healthy"
            )
        with self._lock:
            if len(self._episodes) + self._reserved >= self.settings.max_episodes:
                raise CapacityReached(f"all {self.settings.max_episodes} episode slots are busy; retry later")
            if episode_id is not None and (episode_id in self._episodes or self.traces.get_episode(episode_id)):
                raise EpisodeError(f"episode id {episode_id!r} is already used; choose another or omit it")
            self._reserved += 1
        try:
            sandbox, rest = self.sandboxes.acquire(task)
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
        new_id = episode_id or uuid.uuid4().hex
        trace = EpisodeTrace(
            episode_id=new_id,
            task_id=task.id,
            problem_statement=task.record.problem_statement,
            tools=tool_specs(),
            started_at=_now(),
        )
        episode = Episode(
            id=new_id,
            task=task,
            sandbox=sandbox,
            trace=trace,
            addressable=addressable or episode_id is not None,
            deadline=time.monotonic() + self.settings.wall_clock_budget_s,
            steps_left=self.settings.step_budget,
            engine_epoch=engine.epoch,
        )
        if rest is not None:
            episode.seeding = self.sandboxes.write_rest_soon(sandbox, rest)
        with self._lock:
            self._episodes[new_id] = episode
        self.traces.start_episode(trace)
        log_event("episode.start", new_id, task_id=task.id, sandbox=sandbox.id[:12])
        return episode

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
            },
        )

    def take_step(self, episode: Episode, action: ToolCall) -> CodingObservation:
        """One step: run the tool (or grade on submit or an exhausted budget) and record it."""
        with episode.lock:
            if episode.done:
                raise EpisodeOver(f"episode {episode.id} is over; reset to start another")
            started_at, started = _now(), time.monotonic()
            episode.last_activity = started
            if started > episode.deadline:
                observation = self._finish(
                    episode,
                    "budget_exhausted",
                    ToolResult(
                        feedback="the wall-clock budget ran out before this step; the workspace was graded as it was"
                    ),
                )
            else:
                result = self._run_tool(episode, action)
                episode.steps_taken += 1
                episode.steps_left -= 1
                if is_terminal(action):
                    observation = self._finish(episode, "submitted", result)
                elif episode.steps_left <= 0 and not episode.done:
                    result.feedback = _joined(result.feedback, "step budget used up; graded as is")
                    observation = self._finish(episode, "budget_exhausted", result)
                else:
                    observation = self._observation(episode, result)
            duration = time.monotonic() - started
            if has_invalid_text(action):  # recorded with the bad characters replaced, so the trace stays valid JSON
                action = ToolCall(
                    tool=action.tool,
                    args=json.loads(json.dumps(action.args, ensure_ascii=False).encode("utf-8", "replace").decode()),
                )
            self.metrics.step_seconds.labels(action.tool if action.tool in TOOL_ARGS else "unknown").observe(duration)
            self.live_stats.record_step(duration)
            step = StepTrace(
                index=len(episode.trace.steps),
                action=action,
                observation=observation,
                started_at=started_at,
                duration_s=duration,
            )
            self.traces.add_step(episode.id, step)
            episode.trace.steps.append(step)
            episode.last_activity = time.monotonic()
            log_event(
                "episode.step",
                episode.id,
                tool=action.tool,
                duration_s=round(duration, 4),
                error=observation.metadata.get("tool_error"),
                done=observation.done,
            )
            return observation

    def _run_tool(self, episode: Episode, action: ToolCall) -> ToolResult:
        args_model = TOOL_ARGS.get(action.tool)
        if args_model is None:
            return ToolResult(
                feedback=f"unknown tool {action.tool!r}; tools: {', '.join(TOOL_ARGS)}", error="UNKNOWN_TOOL"
            )
        try:
            args = args_model.model_validate(action.args)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in error.errors())
            schema = json.dumps(args_model.model_json_schema(), separators=(",", ":"))
            return ToolResult(
                feedback=f"arguments don't fit {action.tool}: {problems}; schema: {schema}", error="VALIDATION_ERROR"
            )
        if has_invalid_text(action):
            return ToolResult(
                feedback="arguments are not valid UTF-8 text (they hold a lone surrogate); send valid text",
                error="VALIDATION_ERROR",
            )
        if args_model.terminal:
            return ToolResult(output="submitted")
        try:
            return call_tool(episode.sandbox_ready(), args, self.settings)
        except Exception as error:
            lost = self._environment_failure(episode, error)
            if lost is None:
                raise
            self.metrics.sandbox_failures.labels("exec").inc()
            self.abort(episode, f"{lost.error}: {error}", lock_held=True)
            return lost

    def _environment_failure(self, episode: Episode, error: Exception) -> ToolResult | None:
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
            return ToolResult(feedback="the sandbox died; this episode is over", error=SANDBOX_GONE)
        return None

    def _sandbox_runs(self, episode: Episode) -> bool:
        try:
            return self.backend.container_running(episode.sandbox.id)
        except Exception:  # the engine failed this question too: the episode's sandbox is lost to it
            return False

    def _observation(self, episode: Episode, result: ToolResult, **extra: object) -> CodingObservation:
        metadata = {"episode_id": episode.id, "step": episode.steps_taken, "steps_left": episode.steps_left}
        if result.error:
            metadata["tool_error"] = result.error
        metadata.update(extra)
        return CodingObservation(
            output=result.output,
            exit_code=result.exit_code,
            truncated=result.truncated,
            feedback=result.feedback,
            done=episode.done,
            reward=episode.details.reward if episode.details else None,
            metadata=metadata,
        )

    def _finish(self, episode: Episode, status: str, result: ToolResult) -> CodingObservation:
        """Grade the workspace, end the episode, and build the final observation."""
        try:
            details = grade(
                episode.task,
                episode.sandbox_ready(),
                lambda: self.sandboxes.sandbox(episode.task),
                self.pristine,
                self.settings.grade_limits(),
            )
        except (SandboxError, OSError, ValueError, tarfile.TarError) as error:
            self.metrics.sandbox_failures.labels("grade").inc()
            log.warning("grading episode %s failed: %s", episode.id, error)
            lost = self._environment_failure(episode, error)
            if lost is not None and lost.error != SANDBOX_GONE:
                # No reward: the engine, not the submission, failed; the trainer replays such an episode.
                self._end(episode, "aborted")
                lost.output = result.output
                return self._observation(episode, lost)
            details = RewardDetails(
                reward=0.0,
                mode=self.settings.reward_mode,
                f2p_passed=0,
                p2p_passed=0,
                f2p_total=len(episode.task.record.FAIL_TO_PASS),
                p2p_total=len(episode.task.record.PASS_TO_PASS),
                error=str(error),
            )
        episode.details = details
        self.metrics.reward.observe(details.reward)
        for reason in details.tamper_reasons:
            self.metrics.tampered.labels(reason).inc()
        if details.tampered:
            log_event("episode.tampered", episode.id, reasons=details.tamper_reasons, flags=details.tamper_flags[:10])
        if episode.task.twin_of is not None:
            forged = "twin_rewarded" in details.tamper_reasons
            self.metrics.twins_graded.labels("forged" if forged else "held").inc()
            self.live_stats.record_twin(forged)
        self._end(episode, status)
        summary = failing_summary(details)
        result.feedback = _joined(result.feedback, summary)
        result.output = (result.output + "\n" if result.output else "") + f"graded: reward {details.reward:g}"
        return self._observation(episode, result, reward_details=details.model_dump(mode="json"))

    def _end(self, episode: Episode, status: str) -> None:
        episode.done = True
        with self._lock:
            self._episodes.pop(episode.id, None)
        episode.sandbox.destroy()
        self.traces.end_episode(episode.id, status, _now(), episode.details)
        self.metrics.episodes_total.labels(status).inc()
        self.live_stats.record_end()
        log_event("episode.end", episode.id, status=status, reward=episode.details.reward if episode.details else None)

    def abort(self, episode: Episode, reason: str, lock_held: bool = False) -> None:
        """End `episode` without grading and destroy its sandbox (disconnects, timeouts, shutdown)."""
        if episode.done:
            return
        # Destroy first: a step blocked inside the sandbox then fails fast and releases the lock.
        episode.sandbox.destroy()
        if lock_held:
            self._end(episode, "aborted")
        else:
            with episode.lock:
                if not episode.done:
                    self._end(episode, "aborted")
        log_event("episode.abort", episode.id, reason=reason)

    def _reap_idle_forever(self) -> None:
        interval = min(self.settings.idle_timeout_s / 4, 5.0)
        while not self._stop.wait(interval):
            cutoff = time.monotonic() - self.settings.idle_timeout_s
            for episode in self.live_episodes():
                if episode.last_activity < cutoff and not episode.lock.locked():
                    self.abort(episode, f"idle for more than {self.settings.idle_timeout_s:g}s")
