"""One episode: its state (task, sandbox, trace and budgets) and how one action steps it, to a graded or aborted end.

The server's lifecycle (lifecycle/runtime.py) starts episodes and hands each action to `Stepper.take_step`; every
start, step, grading and end goes to one StepRecorder (recorder.py), which feeds the metrics, the live stats, the
traces and the event log.
"""

from __future__ import annotations

import json
import logging
import tarfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from env_server.grading import PristineCache, failing_summary, grade
from env_server.grading.change_set import ChangeSet
from env_server.settings import ServerSettings
from env_server.stepping.errors import EpisodeOver
from env_server.stepping.recorder import StepRecorder
from env_server.stepping.tools import ToolResult, call_tool
from env_server.task_store import Task
from proto.actions import TOOL_ARGS, ToolCall
from proto.health import SANDBOX_GONE
from proto.observations import CodingObservation, RewardDetails
from proto.traces import EpisodeTrace, StepTrace
from proto.transcript import STEP_BUDGET_USED, WALL_CLOCK_BUDGET_USED
from sandbox import Sandbox, SandboxError, SandboxGone

log = logging.getLogger(__name__)


@dataclass
class Episode:
    """One task being played in one sandbox."""

    id: str
    task: Task
    sandbox: Sandbox
    trace: EpisodeTrace
    addressable: bool
    deadline: float
    steps_left: int
    last_activity: float = field(default_factory=time.monotonic)
    steps_taken: int = 0
    done: bool = False
    details: RewardDetails | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The task's own files still being written into a pooled sandbox; every use of the sandbox waits for it.
    seeding: Future | None = None
    # The engine epoch the sandbox was started in; a later one means the engine restarted under the episode.
    engine_epoch: int = 0
    # A prefix reset's recorded steps as the agent is shown them (lifecycle/prefix_replay.py), else None.
    prefix_history: list[dict[str, Any]] | None = None
    # Whether each command's effect on the workspace is recorded (a reset's track_effects: prefix resets need it).
    track_effects: bool = False

    def sandbox_ready(self) -> Sandbox:
        """The sandbox once the task's files are in it; SandboxGone when writing them failed."""
        if self.seeding is not None:
            try:
                self.seeding.result()
            except SandboxGone:
                raise
            except Exception as error:
                raise SandboxGone(f"the task's files could not be written into the sandbox: {error}") from error
        return self.sandbox


def has_invalid_text(action: ToolCall) -> bool:
    """Whether the arguments hold text that is not valid UTF-8 (a lone surrogate)."""
    try:
        json.dumps(action.args, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def is_terminal(action: ToolCall) -> bool:
    """Whether the action ends the episode (submit)."""
    args_model = TOOL_ARGS.get(action.tool)
    return args_model is not None and args_model.terminal


def _joined(*hints: str | None) -> str | None:
    return "; ".join(h for h in hints if h) or None


class Stepper:
    """Steps the episodes of one server: an action's tool, or the grading on submit or a spent budget, then its record.

    What it asks of the server: `fresh_sandbox` (a started sandbox of a task, for the grading runs),
    `environment_failure` (what ended an episode when the engine or its sandbox failed under a step) and `release`
    (an ended episode leaves the server's live episodes).
    """

    def __init__(
        self,
        settings: ServerSettings,
        recorder: StepRecorder,
        fresh_sandbox: Callable[[Task], Sandbox],
        environment_failure: Callable[[Episode, Exception], ToolResult | None],
        release: Callable[[Episode], None],
    ):
        self.settings, self.recorder, self.fresh_sandbox = settings, recorder, fresh_sandbox
        self.environment_failure, self.release = environment_failure, release
        self.pristine = PristineCache()

    def take_step(self, episode: Episode, action: ToolCall) -> CodingObservation:
        """One step: run the tool (or grade on submit or an exhausted budget) and record it."""
        with episode.lock:
            if episode.done:
                raise EpisodeOver(f"episode {episode.id} is over; reset to start another")
            started_at, started = datetime.now(UTC), time.monotonic()
            episode.last_activity = started
            if started > episode.deadline:
                observation = self._finish(
                    episode,
                    "budget_exhausted",
                    ToolResult(feedback=WALL_CLOCK_BUDGET_USED),
                )
            else:
                result = self._run_tool(episode, action)
                episode.steps_taken += 1
                episode.steps_left -= 1
                if is_terminal(action):
                    observation = self._finish(episode, "submitted", result)
                elif episode.steps_left <= 0 and not episode.done:
                    result.feedback = _joined(result.feedback, STEP_BUDGET_USED)
                    observation = self._finish(episode, "budget_exhausted", result)
                else:
                    observation = self._observation(episode, result)
            duration = time.monotonic() - started
            if has_invalid_text(action):  # recorded with the bad characters replaced, so the trace stays valid JSON
                action = ToolCall(
                    tool=action.tool,
                    args=json.loads(json.dumps(action.args, ensure_ascii=False).encode("utf-8", "replace").decode()),
                )
            step = StepTrace(
                index=len(episode.trace.steps),
                action=action,
                observation=observation,
                started_at=started_at,
                duration_s=duration,
            )
            self.recorder.step(episode, step)
            episode.trace.steps.append(step)
            episode.last_activity = time.monotonic()
            return observation

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
        self.recorder.aborted(episode, reason)

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
            return call_tool(episode.sandbox_ready(), args, self.settings, episode.track_effects)
        except Exception as error:
            lost = self.environment_failure(episode, error)
            if lost is None:
                raise
            self.recorder.sandbox_failed("exec")
            self.abort(episode, f"{lost.error}: {error}", lock_held=True)
            return lost

    def _observation(self, episode: Episode, result: ToolResult, **extra: object) -> CodingObservation:
        metadata = {"episode_id": episode.id, "step": episode.steps_taken, "steps_left": episode.steps_left}
        if result.error:
            metadata["tool_error"] = result.error
        if result.workspace_changed is not None:
            metadata["workspace_changed"] = result.workspace_changed
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
        graded: list[ChangeSet] = []  # what the grading graded, for the trace store (`regrow traces regrade`)
        try:
            details = grade(
                episode.task,
                episode.sandbox_ready(),
                lambda: self.fresh_sandbox(episode.task),
                self.pristine,
                self.settings.grade_limits(),
                on_changes=graded.append,
            )
        except (SandboxError, OSError, ValueError, tarfile.TarError) as error:
            self.recorder.sandbox_failed("grade")
            log.warning("grading episode %s failed: %s", episode.id, error)
            lost = self.environment_failure(episode, error)
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
        self.recorder.graded(episode, details, graded[0] if graded else None)
        self._end(episode, status)
        summary = failing_summary(details)
        result.feedback = _joined(result.feedback, summary)
        result.output = (result.output + "\n" if result.output else "") + f"graded: reward {details.reward:g}"
        return self._observation(episode, result, reward_details=details.model_dump(mode="json"))

    def _end(self, episode: Episode, status: str) -> None:
        episode.done = True
        self.release(episode)
        episode.sandbox.destroy()
        self.recorder.finished(episode, status)
