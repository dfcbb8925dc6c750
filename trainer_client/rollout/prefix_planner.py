"""Prefix sampling (Zhu et al., arXiv:2605.05112): a group that passed or failed whole carries no GRPO signal, so the
task's next group starts from a prefix of one of its episodes with the other outcome: a successful episode's first
steps give a task the policy fails a head start, a failed one's handicap a task it solves. The env rebuilds the
prefix's workspace (`reset(prefix_of=..., prefix_steps=...)`); the agent loop shows the prefix as context, so its
tokens are prompt, never trained on.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

from proto import is_pass
from trainer_client.rollout.agent_loop import Trajectory

logger = logging.getLogger(__name__)
FALLBACK = "fallback"  # the key of a prefix reset's plain options, used when the env refuses the prefix


class PrefixPlanner:
    """Reset options: planned prefix resets first, then the base options; fed each finished group by `observe`."""

    def __init__(self, base: Iterator[dict[str, Any]], fraction: float = 0.5, max_pending: int = 64):
        self._base = base
        self._fraction = fraction
        self._pending: deque[dict[str, Any]] = deque(maxlen=max_pending)
        self._lock = threading.Lock()
        self._passed: dict[str, tuple[str, int]] = {}  # task -> (episode id, env steps) of its last pass
        self._failed: dict[str, tuple[str, int]] = {}
        self.planned = 0

    def __iter__(self) -> PrefixPlanner:
        return self

    def __next__(self) -> dict[str, Any]:
        with self._lock:
            if self._pending:
                return self._pending.popleft()
        return next(self._base)

    def observe(self, group: list[Trajectory]) -> None:
        """Remember the group's episodes by outcome; plan a prefix group of its task when it passed or failed whole."""
        task = group[0].task_id if group else None
        if task is None:
            return
        with self._lock:
            for trajectory in group:
                steps = sum(turn.calls for turn in trajectory.turns)
                if trajectory.episode_id is None or steps < 2 or "prefix_of" in trajectory.reset_options:
                    continue  # a one-step episode has no prefix to give, and a prefix of a prefix is not kept
                if is_pass(trajectory.reward):
                    self._passed[task] = (trajectory.episode_id, steps)
                elif trajectory.reward <= 0.0:
                    self._failed[task] = (trajectory.episode_id, steps)
            rewards = [trajectory.reward for trajectory in group]
            source = None
            if all(is_pass(reward) for reward in rewards):
                source = self._failed.get(task)
            elif all(reward <= 0.0 for reward in rewards):
                source = self._passed.get(task)
            if source is None:
                return
            episode_id, steps = source
            prefix_steps = max(1, min(steps - 1, round(steps * self._fraction)))
            self._pending.append({"prefix_of": episode_id, "prefix_steps": prefix_steps, FALLBACK: {"task_id": task}})
            self.planned += 1
        logger.debug("task %s: next group from %d steps of %s", task, prefix_steps, episode_id)
