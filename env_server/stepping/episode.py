"""One episode's state (its task, sandbox, trace and budgets) and what the runtime asks of a single action."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from env_server.task_store import Task
from proto.actions import TOOL_ARGS, ToolCall
from proto.observations import RewardDetails
from proto.traces import EpisodeTrace
from sandbox import Sandbox, SandboxGone


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
