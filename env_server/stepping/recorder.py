"""The one recorder of episodes: each start, step, grading and end, fanned out to the metrics, the live stats, the
trace store and the event log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from env_server.grading.change_set import ChangeSet
from env_server.observability.event_log import log_event
from env_server.observability.live_stats import LiveStats
from env_server.observability.metrics import ServerMetrics
from env_server.task_store import Task
from env_server.traces.store import TraceStore
from proto.actions import TOOL_ARGS
from proto.observations import RewardDetails
from proto.traces import EpisodeTrace, StepTrace
from sandbox import Sandbox


class RecordedEpisode(Protocol):
    """What the recorder reads of an episode (stepping/episode.py's Episode), so that the recorder does not import
    the stepping that calls it."""

    id: str
    task: Task
    sandbox: Sandbox
    trace: EpisodeTrace
    details: RewardDetails | None


class StepRecorder:
    """What an episode leaves behind; the stepping calls it once per event and never a sink itself."""

    def __init__(self, metrics: ServerMetrics, live_stats: LiveStats, traces: TraceStore):
        self.metrics, self.live_stats, self.traces = metrics, live_stats, traces

    def started(self, episode: RecordedEpisode) -> None:
        self.traces.start_episode(episode.trace)
        log_event("episode.start", episode.id, task_id=episode.task.id, sandbox=episode.sandbox.id[:12])

    def step(self, episode: RecordedEpisode, step: StepTrace) -> None:
        """One step taken (its action as recorded, its observation and its timing)."""
        tool = step.action.tool
        self.metrics.step_seconds.labels(tool if tool in TOOL_ARGS else "unknown").observe(step.duration_s)
        self.live_stats.record_step(step.duration_s)
        self.traces.add_step(episode.id, step)
        log_event(
            "episode.step",
            episode.id,
            tool=tool,
            duration_s=round(step.duration_s, 4),
            error=step.observation.metadata.get("tool_error"),
            done=step.observation.done,
        )

    def graded(self, episode: RecordedEpisode, details: RewardDetails, changes: ChangeSet | None = None) -> None:
        """The reward, the tripwires it tripped, for an impossible twin whether it was forged, and the change set
        graded (kept so that `regrow traces regrade` can grade it again)."""
        if changes is not None:
            self.traces.add_submission(episode.id, changes)
        self.metrics.reward.observe(details.reward)
        for reason in details.tamper_reasons:
            self.metrics.tampered.labels(reason).inc()
        if details.tampered:
            log_event("episode.tampered", episode.id, reasons=details.tamper_reasons, flags=details.tamper_flags[:10])
        if episode.task.twin_of is not None:
            forged = "twin_rewarded" in details.tamper_reasons
            self.metrics.twins_graded.labels("forged" if forged else "held").inc()
            self.live_stats.record_twin(forged)

    def finished(self, episode: RecordedEpisode, status: str) -> None:
        """The episode ended: `submitted`, `budget_exhausted` or `aborted`."""
        self.traces.end_episode(episode.id, status, datetime.now(UTC), episode.details)
        self.metrics.episodes_total.labels(status).inc()
        self.live_stats.record_end()
        log_event("episode.end", episode.id, status=status, reward=episode.details.reward if episode.details else None)

    def aborted(self, episode: RecordedEpisode, reason: str) -> None:
        log_event("episode.abort", episode.id, reason=reason)

    def sandbox_failed(self, operation: str) -> None:
        """A sandbox operation of a step failed under it (`exec`, `grade`)."""
        self.metrics.sandbox_failures.labels(operation).inc()
