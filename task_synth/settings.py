"""Typed settings of a synthesis run (environment prefix REGROW_SYNTH_)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

Mode = Literal["stub", "remove", "file"]
UnitKind = Literal["function", "method", "class", "module", "feature"]
# xunit1 puts each test's file into the JUnit XML, so that a grader can rebuild pytest node ids from it.
DEFAULT_TEST_COMMAND = 'python -m pytest -p no:cacheprovider -o addopts="" --continue-on-collection-errors'


class SynthSettings(BaseSettings):
    """How many tasks to make, how, and how hard to check them."""

    model_config = SettingsConfigDict(env_prefix="REGROW_SYNTH_")

    ref: str | None = Field(None, description="Git ref to check out (branch, tag or commit).")
    modes: list[Mode] = Field(
        default_factory=lambda: list[Mode](["stub"]), description="Deletion modes; tasks alternate between them."
    )
    kinds: list[UnitKind] | None = Field(
        None, description="Kinds of unit to delete (function, method, class, module, feature); unset: every kind."
    )
    seed: int = 0
    max_tasks: int = Field(10, ge=1)
    max_candidates: int | None = Field(None, description="Candidates to try at most; default 4 x max_tasks + 8.")
    jobs: int = Field(1, ge=1, description="Candidates validated in parallel, one sandbox each.")
    test_command: str = DEFAULT_TEST_COMMAND
    sample_others: int = Field(2, ge=0, description="Tests outside the coverage prediction run as a check.")
    baseline_runs: int = Field(3, ge=1)
    flaky_reruns: int = Field(2, ge=0)
    twins: bool = Field(
        False,
        description="Also write each task's impossible twin (twins.jsonl), which the server mixes into resets at "
        "REGROW_SERVER_TWIN_RATE to measure forgery live.",
    )
    min_kill_rate: float = Field(
        0.9,
        ge=0,
        le=1,
        description="A task is kept only if its out-of-process checks kill this share of the unit's mutants that "
        "some recorded or probed call tells apart from the original.",
    )
    max_baseline_failure_fraction: float = Field(0.2, ge=0, le=1)
    test_timeout_s: float = Field(600, gt=0)
    find_links: list[Path] = Field(default_factory=list, description="Local wheel directories searched first.")
    offline: bool = Field(False, description="Resolve dependencies from find_links only (no package index).")
    rewrite_base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint (…/v1) that rewrites problem statements; off when unset."
    )
    rewrite_model: str | None = Field(None, description="Model name sent to the rewrite endpoint.")
    rewrite_api_key_env: str | None = Field(
        "OPENAI_API_KEY", description="Environment variable holding the endpoint's key."
    )
    rewrite_timeout_s: float = Field(60, gt=0)
    rewrite_max_tokens: int = Field(800, ge=16)
    cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "regrow" / "synth")
    split: str | None = Field(None, description="Split of every task; unset: drawn per repository (see split_by).")
    split_by: Literal["repo", "file"] = Field(
        "repo",
        description="What one split draw covers: a repository, or the file "
        "of the deleted unit (train workspaces then show test tasks' code).",
    )
    test_fraction: float = Field(0.0, ge=0, le=1, description="Share of repositories (or files) drawn into `test`.")

    @property
    def candidate_budget(self) -> int:
        return self.max_candidates or 4 * self.max_tasks + 8
