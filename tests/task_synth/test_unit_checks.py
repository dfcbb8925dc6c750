"""Checks chosen unit by unit, without an engine: every deleted unit gets its own budget of checks, is measured by
its own mutants, and a unit whose checks one behaviour could pass has no evidence and keeps its task from the store."""

from __future__ import annotations

from proto.evidence import checks_by_unit, has_secret_evidence, module_of_path, unit_of, units_without_evidence
from proto.tasks import DeletedUnit, IoCheck
from task_synth.validation.io_recording import Recording
from task_synth.validation.recorded_calls import MAX_CHECKS, Call, check_key
from task_synth.validation.task_checks import evidence_rejection, rejected_units
from task_synth.validation.task_strength import Strength
from task_synth.validation.unit_checks import UnitChecks, chosen_for_units, with_evidence
from task_synth.validation.unseen_calls import MAX_UNSEEN

CLAMP = DeletedUnit(path="src/calc/ops.py", qualname="clamp", kind="function", start_line=1, end_line=4)
BOX_PUT = DeletedUnit(path="src/calc/box.py", qualname="Box.put", kind="method", start_line=1, end_line=4)
UNITS = [CLAMP, BOX_PUT]


def call(qualname: str, n: int, result: str | None = None, test: str | None = None, raises: str | None = None) -> Call:
    module = "calc.box" if "." in qualname else "calc.ops"
    check = IoCheck(module=module, qualname=qualname, args=f"({n},)", result=result, raises=raises, test=test)
    if raises:
        check = check.model_copy(update={"result": None})
    elif result is None:
        check = check.model_copy(update={"result": str(n)})
    outcome = (check.result, check.raises, check.state, check.args_after)
    return Call(check, check_key(check), outcome)


def test_a_check_belongs_to_the_unit_its_module_and_name_spell_under_any_import_root():
    assert module_of_path("src/calc/ops.py") == "src.calc.ops" and module_of_path("calc/__init__.py") == "calc"
    assert unit_of(call("clamp", 1).check, UNITS) == CLAMP
    assert unit_of(call("Box.put", 1).check, UNITS) == BOX_PUT
    assert unit_of(IoCheck(module="calc.other", qualname="clamp", args="()", result="1"), UNITS) is None
    module = DeletedUnit(path="calc/ops.py", qualname="calc.ops", kind="module", start_line=1, end_line=9)
    assert unit_of(call("clamp", 1).check, [module]) == module


def test_secret_evidence_needs_two_outcomes_one_of_them_returned_and_no_visible_test_making_the_call():
    returns = [call("clamp", n).check for n in (1, 2)]
    assert has_secret_evidence(returns)
    assert not has_secret_evidence([call("clamp", n, result="0").check for n in (1, 2)])  # `return 0` passes both
    raising = [call("clamp", n, raises=name).check for n, name in ((1, "ValueError"), (2, "KeyError"))]
    assert not has_secret_evidence(raising)  # one class inheriting from both passes both
    assert has_secret_evidence([raising[0], returns[0]])
    assert not has_secret_evidence([call("clamp", n, test="t.py::t").check for n in (1, 2)])  # the tests show them


def test_every_unit_of_a_group_gets_its_own_budget_of_checks():
    linked = [call(name, n, test=f"t.py::t{n}") for name in ("clamp", "Box.put") for n in range(20)]
    unseen = [call(name, n) for name in ("clamp", "Box.put") for n in range(100, 120)]
    chosen = chosen_for_units(UNITS, linked, unseen, None, 0.0)
    by_unit = checks_by_unit(chosen.checks, UNITS)
    for own in by_unit.values():
        assert sum(c.test is not None for c in own) == MAX_CHECKS and sum(c.test is None for c in own) == MAX_UNSEEN
    assert chosen.without_evidence == []


def test_a_unit_is_measured_by_its_own_mutants_and_another_units_checks_kill_none_of_them():
    clamp_calls = [call("clamp", n) for n in (1, 2)]
    put_calls = [call("Box.put", n) for n in (1, 2)]
    # clamp's mutant is told apart only by a call of Box.put (clamp is its helper): clamp's own checks miss it.
    kills = [("src/calc/ops.py::clamp", {put_calls[0].key}), ("src/calc/box.py::Box.put", {put_calls[1].key})]
    chosen = chosen_for_units(UNITS, [], [*clamp_calls, *put_calls], kills, 1.0)
    clamp, put = chosen.strengths["src/calc/ops.py::clamp"], chosen.strengths["src/calc/box.py::Box.put"]
    assert clamp is not None and clamp.kill_rate == 0.0 and put is not None and put.kill_rate == 1.0
    assert chosen.weakest() == ("src/calc/ops.py::clamp", clamp)
    assert chosen.weak(0.9) == ["src/calc/ops.py::clamp"] and chosen.weak(0.0) == []


def test_the_chosen_secret_checks_trade_a_repeated_outcome_for_a_new_one_to_become_evidence():
    same = [call("clamp", n, result="0").check for n in range(MAX_UNSEEN)]
    other = call("clamp", 99, result="5").check
    traded = with_evidence(same, [*same, other])
    assert len(traded) == MAX_UNSEEN and other in traded and has_secret_evidence(traded)
    assert with_evidence(same[:2], same) == same[:2]  # nothing new to trade for: left as it is


def test_a_task_with_a_unit_no_secret_check_can_judge_is_not_written():
    only_clamp = UnitChecks([call("clamp", n).check for n in (1, 2)], {}, ["src/calc/box.py::Box.put"])
    reason = evidence_rejection(Recording(only_clamp.checks, 0, None, only_clamp), 0.9, keep_unchecked=False)
    assert reason is not None and reason[0] == "no_evidence" and "Box.put" in reason[1]
    assert evidence_rejection(Recording([], 0), 0.9, keep_unchecked=False) == (
        "no_evidence",
        "no call of the deleted code could be recorded",
    )
    assert evidence_rejection(Recording(only_clamp.checks, 0, None, only_clamp), 0.9, keep_unchecked=True) is None
    assert units_without_evidence(only_clamp.checks, UNITS) == ["src/calc/box.py::Box.put"]


def test_the_weakest_units_kill_rate_decides_and_says_which_unit():
    weak = UnitChecks([], {"a.py::f": Strength(10, 0, 10, 0.0), "a.py::g": Strength(10, 0, 5, 0.0)}, [])
    reason = evidence_rejection(Recording([], 0, None, weak), 0.9, keep_unchecked=False)
    assert reason is not None and reason[0] == "weak_checks" and "a.py::g kill 5 of 10" in reason[1]
    total = weak.total(2.0)
    assert total is not None and (total.mutants, total.killed) == (20, 15)


def test_a_weak_rejection_names_the_weak_units_even_where_unchecked_ones_are_kept():
    """With --keep-unchecked, a group with an unchecked unit and a weak one is rejected as weak_checks; it must come
    back without the weak unit, not without the unchecked one (before, the unchecked one was named)."""
    mixed = UnitChecks([], {"a.py::f": Strength(10, 0, 10, 0.0), "a.py::g": Strength(10, 0, 5, 0.0)}, ["a.py::h"])
    recording = Recording([], 0, None, mixed)
    reason = evidence_rejection(recording, 0.9, keep_unchecked=True)
    assert reason is not None and reason[0] == "weak_checks"
    assert rejected_units(recording, reason[0], 0.9) == ["a.py::g"]
    assert rejected_units(recording, "no_evidence", 0.9) == ["a.py::h"]
    assert rejected_units(Recording([], 0), "no_evidence", 0.9) == []
