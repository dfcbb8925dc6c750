"""Pair extraction: consensus, ties, a student that agrees, a teacher error, and the threshold."""

import pytest

from proto.actions import ToolCall
from trainer_client.replay.action_key import action_key
from trainer_client.replay.pair_decision import Outcome, TeacherVote, decide_step

READ_CORE = ToolCall(tool="read_file", args={"path": "mathlib/core.py"})
RUN_TESTS = ToolCall(tool="run", args={"command": "python -m pytest -q"})
SUBMIT = ToolCall(tool="submit", args={})


def votes(*actions: ToolCall) -> list[TeacherVote]:
    return [TeacherVote(teacher=f"t{i}", action=action) for i, action in enumerate(actions)]


def test_unanimous_teachers_against_the_student_make_a_pair():
    decision = decide_step(SUBMIT, votes(READ_CORE, READ_CORE, READ_CORE), min_agreement=0.5)
    assert decision.outcome is Outcome.PAIR
    assert decision.chosen == READ_CORE
    assert decision.teachers == ["t0", "t1", "t2"]
    assert decision.agreement == 1.0


def test_a_majority_makes_a_pair_and_names_only_the_agreeing_teachers():
    decision = decide_step(SUBMIT, votes(READ_CORE, RUN_TESTS, READ_CORE), min_agreement=0.6)
    assert decision.outcome is Outcome.PAIR
    assert decision.teachers == ["t0", "t2"]
    assert decision.agreement == pytest.approx(2 / 3)


def test_teachers_agreeing_with_the_student_give_no_pair():
    decision = decide_step(READ_CORE, votes(READ_CORE, READ_CORE), min_agreement=0.5)
    assert decision.outcome is Outcome.STUDENT_AGREES
    assert decision.chosen is None


def test_a_tie_for_the_most_votes_gives_no_pair():
    decision = decide_step(SUBMIT, votes(READ_CORE, RUN_TESTS), min_agreement=0.5)
    assert decision.outcome is Outcome.TIE


def test_one_teacher_error_gives_no_pair_even_when_the_rest_agree():
    ballot = votes(READ_CORE, READ_CORE) + [TeacherVote(teacher="t2", error="timeout after 30s")]
    assert decide_step(SUBMIT, ballot, min_agreement=0.5).outcome is Outcome.TEACHER_ERROR


def test_agreement_below_the_threshold_gives_no_pair():
    ballot = votes(READ_CORE, READ_CORE, RUN_TESTS, SUBMIT)
    assert decide_step(ToolCall(tool="list_dir"), ballot, min_agreement=0.75).outcome is Outcome.BELOW_THRESHOLD
    assert decide_step(ToolCall(tool="list_dir"), ballot, min_agreement=0.5).outcome is Outcome.PAIR


def test_the_threshold_must_be_a_share():
    with pytest.raises(ValueError, match="min_agreement"):
        decide_step(SUBMIT, votes(READ_CORE), min_agreement=1.5)


def test_spellings_of_one_action_compare_equal():
    assert action_key(ToolCall(tool="read_file", args={"path": "/workspace/mathlib/../mathlib/core.py"})) == action_key(
        READ_CORE
    )
    assert action_key(ToolCall(tool="list_dir", args={"path": "/workspace"})) == action_key(ToolCall(tool="list_dir"))
    assert action_key(ToolCall(tool="run", args={"command": " ls ", "timeout": 5})) == action_key(
        ToolCall(tool="run", args={"command": "ls", "timeout": 5.0})
    )
    assert action_key(ToolCall(tool="read_file", args={"path": "a.py", "start_line": None})) == action_key(
        ToolCall(tool="read_file", args={"path": "a.py"})
    )


def test_different_arguments_or_tools_stay_different():
    assert action_key(READ_CORE) != action_key(ToolCall(tool="read_file", args={"path": "mathlib/other.py"}))
    assert action_key(READ_CORE) != action_key(
        ToolCall(tool="read_file", args={"path": "mathlib/core.py", "end_line": 9})
    )
    assert action_key(ToolCall(tool="bogus", args={"x": 1})) != action_key(ToolCall(tool="bogus", args={"x": 2}))


def test_consensus_counts_equal_spellings_together():
    ballot = votes(ToolCall(tool="read_file", args={"path": "/workspace/mathlib/core.py"}), READ_CORE, RUN_TESTS)
    decision = decide_step(SUBMIT, ballot, min_agreement=0.6)
    assert decision.outcome is Outcome.PAIR
    assert decision.teachers == ["t0", "t1"]
