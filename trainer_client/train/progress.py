"""What a training run shows while it collects episodes: episodes of those needed, turns, mean reward, env trouble.

The numbers are read from the rollout stream and the trainer's state in a thread, every `interval_s`, and handed to
a `show` callable (the CLI draws them with rich); library code itself prints nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from trainer_client.rollout.stream import StreamStats


@dataclass(frozen=True)
class RolloutProgress:
    """One reading of a run in progress."""

    step: int
    steps: int
    episodes: int
    episodes_needed: int
    turns: int  # written by the policy so far, episodes still in play included
    mean_reward: float | None
    replays: int
    env_waits: int
    groups_dropped: int
    tokens: int = 0  # the policy's, as turns
    uniform_dropped: int = 0  # groups whose rewards were all equal, played again

    def line(self) -> str:
        reward = "-" if self.mean_reward is None else f"{self.mean_reward:.3f}"
        return (
            f"step {self.step}/{self.steps} | episodes {self.episodes}/{self.episodes_needed} | turns {self.turns} "
            f"| tokens {self.tokens} | mean reward {reward} | replayed {self.replays} | env waits {self.env_waits} "
            f"| groups dropped {self.groups_dropped} | uniform dropped {self.uniform_dropped}"
        )


def rollout_progress(stats: StreamStats, step: int, steps: int, episodes_per_step: int) -> RolloutProgress:
    return RolloutProgress(
        step=step,
        steps=steps,
        episodes=stats.episodes,
        episodes_needed=steps * episodes_per_step,
        turns=stats.turns_streamed,
        tokens=stats.tokens_streamed,
        mean_reward=stats.reward_sum / stats.episodes if stats.episodes else None,
        replays=stats.episode_retries,
        env_waits=stats.capacity_waits + stats.unavailable_waits,
        groups_dropped=stats.groups_dropped_lost + stats.groups_dropped_stale,
        uniform_dropped=stats.groups_dropped_uniform,
    )


class ProgressWatch:
    """Calls `show(read())` every `interval_s` while the `with` block runs, and once more at its end."""

    def __init__(
        self, read: Callable[[], RolloutProgress], show: Callable[[RolloutProgress], None], interval_s: float = 0.5
    ):
        self._read, self._show, self._interval_s = read, show, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="train-progress", daemon=True)

    def __enter__(self) -> ProgressWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._show(self._read())

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._show(self._read())
