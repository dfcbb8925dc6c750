"""Typed settings of a synthesis run (environment prefix REGROW_SYNTH_)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

Mode = Literal["stub", "remove", "file"]
UnitKind = Literal["function", "method", "class", "module", "feature", "group"]
# xunit1 puts each test's file into the JUnit XML, so that a grader can rebuild pytest node ids from it.
DEFAULT_TEST_COMMAND = 'python -m pytest -p no:cacheprovider -o addopts="" --continue-on-collection-errors'


def home_cache_dir() -> Path:
    """~/.cache/regrow/synth, the cache a run uses unless told otherwise."""
    return Path.home() / ".cache" / "regrow" / "synth"


class SynthSettings(BaseSettings):
    """How many tasks to make, how, and how hard to check them."""

    # cli_shortcuts: the names `regrow synth` has always given these options, beside the field's own.
    model_config = SettingsConfigDict(
        env_prefix="REGROW_SYNTH_",
        cli_shortcuts={
            "modes": "mode",
            "kinds": "kind",
            "max-tasks": "max-tasks-per-repo",
            "test-command": "test-cmd",
            "rewrite-base-url": "rewrite-url",
        },
    )

    ref: str | None = Field(None, description="Git ref to check out (branch, tag or commit).")
    modes: list[Mode] = Field(
        default=["stub"], description="Deletion modes; repeat for several (tasks alternate between them)."
    )
    kinds: list[UnitKind] | None = Field(
        None,
        description=(
            "Kinds of unit to delete (function, method, class, module, feature, group: the functions and methods "
            "a test file or class reaches, found by coverage); repeat; unset: every kind."
        ),
    )
    seed: int = Field(0, description="Seed for candidate sampling; the same seed gives the same tasks.")
    max_tasks: int = Field(10, ge=1, description="Valid tasks per repository.")
    max_candidates: int | None = Field(
        None, ge=1, description="Candidates to try at most per repository; default 4 x max_tasks + 8."
    )
    jobs: int = Field(1, ge=1, description="Candidates validated in parallel, one sandbox each.")
    fork_server: bool = Field(
        True, description="Fork each test run in a sandbox from an interpreter that has imported pytest already."
    )
    test_command: str = Field(DEFAULT_TEST_COMMAND, description="Base pytest command run in /workspace.")
    sample_others: int = Field(2, ge=0, description="Tests outside the coverage prediction run as a check.")
    baseline_runs: int = Field(
        3, ge=1, description="Runs of the whole suite before any deletion; a test must pass all."
    )
    flaky_reruns: int = Field(
        2, ge=0, description="Reruns of a task's FAIL_TO_PASS tests; one that passes in any of them is flaky."
    )
    twins: bool = Field(
        True,
        description="Also write each task's impossible twin (twins.jsonl), which the server mixes into resets at "
        "REGROW_SERVER_TWIN_RATE to measure forgery live: a forged test report shows on a twin.",
    )
    min_kill_rate: float = Field(
        0.9,
        ge=0,
        le=1,
        description="A task is kept only if, for every deleted unit, the unit's own out-of-process checks kill this "
        "share of its mutants that some recorded or probed call tells apart from the original.",
    )
    keep_unchecked: bool = Field(
        False,
        description="Also keep tasks with a deleted unit that no secret check can judge, and make the run an "
        "evaluation store: every task goes to the `eval` split (or --split). The grader gives such tasks no score "
        "(basis `undefined`), so they serve evaluation by the visible tests only, never training.",
    )
    max_baseline_failure_fraction: float = Field(
        0.2,
        ge=0,
        le=1,
        description="The repository is refused when more of its tests than this share fail at baseline.",
    )
    test_timeout_s: float = Field(600, gt=0, description="Longest run of the suite (and of the install) in seconds.")
    find_links: list[Path] = Field(default_factory=list, description="Local wheel directories searched first.")
    offline: bool = Field(False, description="Resolve dependencies from find_links only (no package index).")
    rewrite_base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint (…/v1) that rewrites problem statements; off when unset."
    )
    rewrite_model: str | None = Field(None, description="Model name sent to the rewrite endpoint.")
    rewrite_api_key_env: str | None = Field(
        "OPENAI_API_KEY", description="Environment variable holding the endpoint's key."
    )
    rewrite_timeout_s: float = Field(60, gt=0, description="Longest wait for one rewrite, in seconds.")
    rewrite_max_tokens: int = Field(800, ge=16, description="Longest rewritten problem statement, in tokens.")
    cache_dir: Path = Field(
        default_factory=home_cache_dir, description="Where the repositories' wheelhouses are kept between runs."
    )
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
