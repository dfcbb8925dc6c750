"""What the environment answers: observations, episode state and the graded reward."""

from typing import Any, Literal

from pydantic import BaseModel, Field

from proto.openenv_types import Observation, State

# fraction: the share of deleted units whose secret checks agree, times the share of FAIL_TO_PASS tests not failing,
# when no PASS_TO_PASS test broke; binary: 1 only when everything holds.
RewardMode = Literal["fraction", "binary"]


class CodingObservation(Observation):
    """The result of one step (or of reset) in a coding episode."""

    output: str = Field(default="", description="The tool's output (stdout, then stderr).")
    exit_code: int | None = Field(default=None, description="Exit code of a command, else null.")
    truncated: bool = Field(default=False, description="True when the output was cut at the cap.")
    feedback: str | None = Field(default=None, description="A short hint when the step went wrong.")
    problem_statement: str | None = Field(default=None, description="Set on reset: the task.")
    tools: list[dict[str, Any]] | None = Field(default=None, description="Set on reset: the tools.")


class EpisodeState(State):
    """Server-side state of one episode."""

    task_id: str | None = None
    done: bool = False
    steps_left: int | None = None
    seconds_left: float | None = None


class TestOutcome(BaseModel):
    """One test's result in grading."""

    nodeid: str
    outcome: Literal["passed", "failed", "error", "skipped", "missing"]
    group: Literal["FAIL_TO_PASS", "PASS_TO_PASS", "HIDDEN"]


class RefusedPath(BaseModel):
    """A change the grader left out, and why."""

    path: str
    reason: str


class UnitCredit(BaseModel):
    """How one deleted unit fared: credited only when its secret checks all agree with the original's outcomes."""

    unit: str = Field(description="The unit: its file and qualified name, `calc/ops.py::clamp`.")
    credited: bool
    secret_passed: int = Field(description="Checks of calls no visible test makes that agreed.")
    secret_total: int
    consistency_failed: int = Field(
        default=0, description="Checks of the visible tests' own calls that disagreed: each takes the unit's credit."
    )
    evidence: bool = Field(
        default=True, description="Whether the unit has secret checks that no single behaviour passes."
    )


# A reward at least this high solved its task: every deleted unit credited. Rewards are sums of float shares, so the bar
# sits a hair under 1.0. Every pass rate (dashboard, frontier, trainer, ladder, benches) counts by it.
PASS_REWARD = 1.0 - 1e-9


def is_pass(reward: float) -> bool:
    """Whether `reward` solved its task."""
    return reward >= PASS_REWARD


class RewardDetails(BaseModel):
    """How a submission was graded; goes into the final observation's metadata."""

    reward: float
    mode: RewardMode
    f2p_passed: int
    f2p_total: int
    p2p_passed: int
    p2p_total: int
    tests: list[TestOutcome] = Field(default_factory=list)
    ignored_paths: list[str] = Field(default_factory=list, description="Edits left out of grading.")
    refused: list[RefusedPath] = Field(default_factory=list, description="The edits left out, each with its reason.")
    hidden_passed: int = Field(default=0, description="Hidden checks of the deleted unit that passed.")
    hidden_total: int = Field(default=0, description="Hidden checks of the deleted unit the agent never saw.")
    basis: Literal["checks", "undefined", "visible_tests"] = Field(
        default="checks",
        description="What the reward stands on: `checks`, out-of-process replays of each deleted unit on inputs "
        "the agent never saw, judged by the server (the visible tests' report can only take credit away); "
        "`undefined`, a unit has no such checks, so no evidence can pay and the reward is 0 for want of a score; "
        "`visible_tests`, the test report decided (graders before round 4 only).",
    )
    units_credited: int = Field(default=0, description="Deleted units whose secret checks all agreed.")
    units_total: int = Field(default=0, description="Deleted units of the task.")
    units: list[UnitCredit] = Field(default_factory=list, description="Each deleted unit's credit and evidence.")
    timeout_s: float | None = Field(default=None, description="The time each graded run was given.")
    tampered: bool = Field(
        default=False,
        description="The grading was shown to be forged (see `tamper_reasons`). The reward is 0.",
    )
    tamper_reasons: list[str] = Field(
        default_factory=list,
        description="Which tripwires fired: `twin_rewarded`, `check_records_forged` (a replayed call reported "
        "more than once or on another's channel); older graders: `counterfactual_passed`.",
    )
    tamper_flags: list[str] = Field(
        default_factory=list,
        description="What the static scan of the change set found: evidence for a person to read; it costs no reward.",
    )
    diff: str = Field(
        default="",
        description="The graded change set as a unified diff against the task's workspace "
        "(cut, with a closing line saying so, past the cap).",
    )
    error: str | None = None
