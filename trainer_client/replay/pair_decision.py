"""The decision at one step: do the teachers' answers make a preference pair against the student?"""

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from proto.actions import ToolCall
from trainer_client.replay.action_key import action_key


class Outcome(str, Enum):
    """Every way a step can end; the report counts each."""

    PAIR = "pair"
    STUDENT_AGREES = "student_agrees"
    TIE = "tie"
    BELOW_THRESHOLD = "below_threshold"
    TEACHER_ERROR = "teacher_error"
    GATED_OUT = "gated_out"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TEACHER_STOPPED = "teacher_stopped"


@dataclass(frozen=True)
class TeacherVote:
    """One teacher's answer at a step: an action, or the error that stopped it."""

    teacher: str
    action: ToolCall | None = None
    error: str | None = None


@dataclass(frozen=True)
class StepDecision:
    """What the votes decided; `chosen` and `teachers` are set only for a pair."""

    outcome: Outcome
    chosen: ToolCall | None = None
    teachers: list[str] = field(default_factory=list)
    agreement: float = 0.0


def decide_step(student: ToolCall, votes: list[TeacherVote], min_agreement: float) -> StepDecision:
    """A pair when at least `min_agreement` of the teachers agree on one action that is not the student's.

    Any teacher error, a tie for the most votes, or a winner equal to the student's action gives no pair.
    """
    if not 0 < min_agreement <= 1:
        raise ValueError(f"min_agreement must be in (0, 1], got {min_agreement}")
    if not votes:
        raise ValueError("decide_step needs at least one teacher vote")
    actions = [vote.action for vote in votes if vote.error is None and vote.action is not None]
    if len(actions) < len(votes):
        return StepDecision(Outcome.TEACHER_ERROR)
    keys = [action_key(action) for action in actions]
    ranked = Counter(keys).most_common()
    top_key, top_count = ranked[0]
    agreement = top_count / len(votes)
    if len(ranked) > 1 and ranked[1][1] == top_count:
        return StepDecision(Outcome.TIE, agreement=agreement)
    if top_key == action_key(student):
        return StepDecision(Outcome.STUDENT_AGREES, agreement=agreement)
    if agreement < min_agreement:
        return StepDecision(Outcome.BELOW_THRESHOLD, agreement=agreement)
    agreeing = [vote for vote, key in zip(votes, keys) if key == top_key]
    return StepDecision(
        Outcome.PAIR, chosen=agreeing[0].action, teachers=[vote.teacher for vote in agreeing], agreement=agreement
    )
