"""What `GET /health` answers: whether a server can start episodes, and how many more it would take.

The trainer weighs env servers by `free_slots` and skips one whose `status` is not "healthy".
"""

from typing import Literal

from pydantic import BaseModel, Field

# Step errors that say the environment lost the episode, not that the agent did something wrong:
# a trainer replays such an episode instead of learning a reward of 0 from it.
SANDBOX_GONE = "SANDBOX_GONE"
ENGINE_UNREACHABLE = "ENGINE_UNREACHABLE"
ENGINE_RESTARTED = "ENGINE_RESTARTED"
ENVIRONMENT_FAILURES = frozenset({SANDBOX_GONE, ENGINE_UNREACHABLE, ENGINE_RESTARTED})


class ServerHealth(BaseModel):
    """One env server's health: 200 with status "healthy", else 503 with the reason."""

    status: Literal["healthy", "unhealthy"]
    reason: str | None = Field(default=None, description="Why unhealthy, e.g. 'engine unreachable: <error>'.")
    engine_up: bool = True
    free_slots: int = Field(ge=0, description="Episodes the server would start now.")
    max_episodes: int = Field(ge=0)
    active_episodes: int = Field(default=0, ge=0)
    version: str | None = None
