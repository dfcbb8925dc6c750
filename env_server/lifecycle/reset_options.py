"""What a reset asks for: a task by id, or a seed and split to draw one from (uniformly, or at the frontier of a run's
pass rates); a recorded episode whose prefix to start from; why, and by which run, the episode is played; and whether
its commands' effects on the workspace are recorded, so that a later prefix reset can take its steps."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from env_server.stepping.errors import BadResetOption, UnknownOrigin

if TYPE_CHECKING:
    from env_server.task_store import Task
    from proto.traces import EpisodeTrace, StepTrace

CLIENT_ORIGINS = ("training", "evaluation", "demonstration")  # a prefix reset's origin is the server's to say


@dataclass(frozen=True)
class ResetOptions:
    """A reset's options as the WebSocket, HTTP and gRPC resets give them; None where a reset leaves one out."""

    task_id: str | None = None
    seed: int | None = None
    split: str | None = None
    sampler: str | None = None
    prefix_of: str | None = None
    prefix_steps: int | None = None
    origin: str | None = None
    run_id: str | None = None
    track_effects: bool | None = None

    @classmethod
    def of(cls, seed: int | None, data: dict[str, Any]) -> ResetOptions:
        """The options among a reset's data (OpenEnv hands them over as keyword arguments); other keys are ignored."""
        given = {option.name: data.get(option.name) for option in fields(cls) if option.name != "seed"}
        if given["track_effects"] is not None and not isinstance(given["track_effects"], bool):
            raise BadResetOption(f"track_effects must be true or false, not {given['track_effects']!r}")
        return cls(seed=seed, **given)

    @property
    def prefixed(self) -> bool:
        """Whether the reset asks for a recorded episode's prefix (PrefixRefused says what is missing)."""
        return self.prefix_of is not None or self.prefix_steps is not None

    def recorded_origin(self) -> str:
        """The origin the episode is recorded with: `prefix` for a prefix reset, `training` where the client says
        none."""
        if self.origin and self.origin not in CLIENT_ORIGINS:
            raise UnknownOrigin(
                f"origin {self.origin!r} is not one of {', '.join(CLIENT_ORIGINS)}; leave it out for training"
            )
        if self.prefix_of is not None:
            return "prefix"
        return self.origin or "training"


@dataclass(frozen=True)
class ResetPlan:
    """A reset as decided, once, before anything is done about it: the options (a prefix reset's naming its recorded
    task), the task it plays, the origin it records, and a prefix reset's recorded episode, the writes to replay and
    the steps they took."""

    options: ResetOptions
    task: Task
    origin: str
    recorded: EpisodeTrace | None = None
    writes: list[StepTrace] = field(default_factory=list)
    steps: int = 0
