"""Recorded episodes as `regrow traces export` writes them (one EpisodeTrace per JSONL line)."""

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
