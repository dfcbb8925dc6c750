"""What a rollout stream is told: how it plays groups (`StreamSettings`) and how it rides out env faults
(`EnvRetries`). Plain dataclasses, so that the train settings can make them without loading the stream."""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StreamSettings:
    """How the workers play: how many at once, how many episodes a group, and which finished groups reach the
    trainer."""

    workers: int = 4
    group_size: int = 4
    max_staleness: int = 1  # a group started more than this many policy updates ago is dropped
    max_buffered_groups: int = 4  # groups in play or waiting for the trainer
    drop_uniform: bool = False  # play another group in place of one whose rewards are all equal
    uniform_patience: int = 4  # uniform groups dropped in a row before one is kept
    reset_tags: dict[str, Any] = field(default_factory=dict)  # sent with every reset: why and by which run it is played


@dataclass(frozen=True)
class EnvRetries:
    """How the workers ride out env faults: back off while at capacity or down (failing after `outage_s` down), and
    replay an episode lost after it started up to `episode_retries` times."""

    episode_retries: int = 2
    backoff_max_s: float = 30.0
    outage_s: float = 300.0
    health_interval_s: float = 5.0
