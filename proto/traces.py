"""Recorded episodes as `regrow traces export` writes them (one EpisodeTrace per JSONL line), and the tokens a
trainer recorded for them (one EpisodeTokens per line of its episode_tokens.jsonl)."""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from proto.actions import ToolCall
from proto.observations import CodingObservation, RewardDetails


class StepTrace(BaseModel):
    """One step: the action the agent took and what the environment answered."""

    index: int
    action: ToolCall
    observation: CodingObservation
    started_at: datetime
    duration_s: float


# Why an episode was played: the frontier sampler learns pass rates from training episodes alone. A client that
# does not say is training; a prefix reset is always a prefix, whatever it says.
EpisodeOrigin = Literal["training", "evaluation", "demonstration", "prefix"]
EPISODE_ORIGINS: tuple[str, ...] = ("training", "evaluation", "demonstration", "prefix")


class EpisodeTrace(BaseModel):
    """One whole episode, from reset to the graded end."""

    episode_id: str
    task_id: str
    problem_statement: str
    tools: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[StepTrace] = Field(default_factory=list)
    status: Literal["running", "submitted", "budget_exhausted", "aborted"] = "running"
    reward: float | None = None
    reward_details: RewardDetails | None = None
    started_at: datetime
    ended_at: datetime | None = None
    prefix_of: str | None = Field(
        default=None, description="The recorded episode whose first prefix_steps steps this one starts after."
    )
    prefix_steps: int = Field(default=0, ge=0, description="Steps of prefix_of replayed before this episode's first.")
    origin: EpisodeOrigin = Field(default="training", description="Why it was played (the reset's `origin`).")
    run_id: str | None = Field(default=None, description="The training run that played it (the reset's `run_id`).")


class HintedTurnTokens(BaseModel):
    """A turn the env gave feedback on, as SDPO distills it; offsets index the episode's completion ids."""

    hint_at: int  # where the hint goes: before the turn's generation prompt (negative: inside the prompt)
    start: int
    end: int
    hint_ids: list[int]  # the feedback as the hint message's token ids


class EpisodeTokens(BaseModel):
    """The policy's tokens of one episode as the trainer played it; the export joins them to the trace by episode_id."""

    episode_id: str
    model: str | None = None
    policy_version: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # the sampler's, one per completion id; 0.0 for env tokens
    env_mask: list[int]  # one per completion id: 1 the policy wrote it, 0 the env inserted it
    # What a replay of the step needs beside the ids (`regrow bench gpu`); absent in files of older trainers.
    reward: float | None = None
    hinted_turns: list[HintedTurnTokens] = Field(default_factory=list)
