"""What the environment answers: observations, episode state and the graded reward."""

from typing import Any, Literal

from openenv.core.env_server.types import Observation, State
from pydantic import BaseModel, Field

# fraction: F2P passed over F2P total, when nothing else broke; binary: 1 only when every test passes.
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
    basis: Literal["checks", "visible_tests"] = Field(
        default="checks",
        description="What the reward stands on: `checks`, out-of-process replays of the unit on inputs the agent "
        "never saw, judged by the server; `visible_tests`, the task has none, so the visible tests' own report "
        "(which the code under test could forge) decides.",
    )
    timeout_s: float | None = Field(default=None, description="The time each graded run was given.")
    tampered: bool = Field(
        default=False,
        description="The test run was shown to be forged: its visible FAIL_TO_PASS tests passed with the deleted "
        "unit put back as the task's stub. The reward is 0.",
    )
    tamper_reasons: list[str] = Field(default_factory=list, description="Which tripwires fired: counterfactual_passed.")
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
