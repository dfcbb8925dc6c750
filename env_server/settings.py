"""Server configuration from the environment (prefix REGROW_SERVER_)."""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from proto.observations import RewardMode

# What one episode needs at most: its sandbox's memory limit plus the grading container and slack.
EPISODE_MEMORY_BYTES = 1536 * 1024 * 1024


def default_max_episodes() -> int:
    """As many concurrent episodes as host memory allows, at least 1."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 4
    return max(1, int(total * 0.8) // EPISODE_MEMORY_BYTES)


@dataclass(frozen=True)
class GradeLimits:
    """How a grading runs: the reward mode, the test timeouts and the size limits of a submission."""

    mode: RewardMode = "fraction"
    timeout_s: float = 300.0  # the cap; a task with a measured baseline gets factor x baseline + slack below it
    timeout_factor: float = 3.0
    timeout_slack_s: float = 30.0
    min_timeout_s: float = 30.0
    file_cap_bytes: int = 5 * 1024 * 1024
    tree_cap_bytes: int = 256 * 1024 * 1024


class ServerSettings(BaseSettings):
    """Limits and locations of one env server."""

    # cli_shortcuts: the names `regrow serve` has always given these options, beside the field's own.
    model_config = SettingsConfigDict(
        env_prefix="REGROW_SERVER_", cli_shortcuts={"tasks-dir": "tasks", "trace-db": "traces"}
    )

    tasks_dir: Path = Field(default=Path("tasks"), description="Task store directory (tasks.jsonl, hidden/)")
    host: str = Field(default="127.0.0.1", description="Bind address")
    port: int = Field(default=8000, description="HTTP/WebSocket port")
    grpc_port: int = Field(default=50051, description="gRPC port")
    trace_db: Path | None = Field(default=None, description="SQLite trace file; default TASKS_DIR/traces.sqlite")
    trace_backlog_mib: int = Field(
        default=64, ge=1, description="Memory for trace records a locked or full database refused, kept to retry"
    )
    max_episodes: int = Field(
        default_factory=default_max_episodes,
        ge=1,
        description="Concurrent episodes, more get CAPACITY_REACHED; default: what host memory allows",
    )
    idle_timeout_s: float = Field(
        default=600.0, gt=0, description="An idle episode is ended and its sandbox destroyed after this many seconds"
    )
    step_budget: int = Field(default=100, ge=1, description="Steps an episode may take before it is graded")
    wall_clock_budget_s: float = Field(
        default=1800.0, gt=0, description="Seconds an episode may last before it is graded"
    )
    run_timeout_default_s: float = Field(default=30.0, gt=0, description="Timeout of a `run` that names none")
    run_timeout_cap_s: float = Field(default=120.0, gt=0, description="The longest `run` timeout an agent may ask for")
    grade_timeout_s: float = Field(default=300.0, gt=0, description="The most a graded run may take")
    max_write_bytes: int = Field(default=1024 * 1024, ge=1, description="Largest content one `write_file` may write")
    read_cap_chars: int = Field(
        default=64 * 1024, ge=1, description="Characters of a read, search or listing returned before truncation"
    )
    warm_pool_per_image: int = Field(default=2, ge=0, description="Warm containers kept ready per repository image")
    warm_pool_total: int = Field(default=8, ge=0, description="Warm containers kept ready over all images")
    reaper_interval_s: float = Field(
        default=60.0, gt=0, description="Seconds between two sweeps for containers no live episode owns"
    )
    engine_check_s: float = Field(
        default=5.0, gt=0, description="Seconds between two pings of the Docker engine (GET /health reads the last)"
    )
    reward_mode: RewardMode = Field(
        default="fraction",
        description="fraction: the share of FAIL_TO_PASS tests credited (0 if a PASS_TO_PASS test breaks); binary",
    )
    twin_rate: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of sampled resets that get an impossible twin (`regrow synth --twins`): any reward on one "
        "is a forgery, shown as a live rate",
    )
    sampler: Literal["uniform", "frontier"] = Field(
        default="uniform",
        description="How a reset without a task id draws from its split, unless it names one (reset(sampler=...)): "
        "uniform, or frontier: the tasks whose recorded pass rate is nearest one half (env_server/frontier_sampler.py)",
    )
    frontier_explore_share: float = Field(
        default=0.2, ge=0, le=1, description="Share of frontier draws that go to tasks graded fewer than min_seen times"
    )
    frontier_min_seen: int = Field(default=4, ge=1, description="Graded episodes before a task's pass rate counts")
    frontier_window: int = Field(
        default=32,
        ge=1,
        description="A task's pass rate is read from its latest this-many graded training episodes of the run that "
        "draws: recent enough to follow a policy that learns (4 to 8 groups), and an error of at most 0.09 at 1/2",
    )
    grade_timeout_factor: float = Field(
        default=3.0, gt=0, description="A graded run gets this many times the suite's time at synthesis, plus slack"
    )
    grade_timeout_slack_s: float = Field(default=30.0, ge=0, description="Added to the multiple of the baseline")
    submission_file_cap_bytes: int = Field(
        default=5 * 1024 * 1024, ge=1, description="Largest file a submission may change"
    )
    submission_cap_bytes: int = Field(default=256 * 1024 * 1024, ge=1, description="Largest /workspace a grading reads")
    api_token: SecretStr | None = Field(
        default=None, description="Bearer token /episodes, /dashboard and the episode viewer require, when set"
    )
    show_solutions: bool = Field(
        default=False, description="The episode viewer shows hidden checks' names and the task's solution patch"
    )
    dashboard_refresh_s: float = Field(default=1.0, gt=0, description="Seconds between two dashboard updates")

    @field_validator("api_token", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: object) -> object:
        """An empty REGROW_SERVER_API_TOKEN (a stack file's `${TOKEN:-}`) means no token, not one no client can send."""
        return None if isinstance(value, str) and not value.strip() else value

    def grade_limits(self) -> GradeLimits:
        return GradeLimits(
            mode=self.reward_mode,
            timeout_s=self.grade_timeout_s,
            timeout_factor=self.grade_timeout_factor,
            timeout_slack_s=self.grade_timeout_slack_s,
            file_cap_bytes=self.submission_file_cap_bytes,
            tree_cap_bytes=self.submission_cap_bytes,
        )

    def trace_path(self) -> Path:
        return self.trace_db or self.tasks_dir / "traces.sqlite"
