"""The verdict without an engine: how the server's check verdicts, unit by unit, and the test report become a reward."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from env_server.grading.checks import CheckResult, JudgedChecks
from env_server.grading.submission import grading_timeout
from env_server.grading.verdict import RunReport, failing_summary, score
from env_server.settings import GradeLimits
from proto.tasks import DeletedUnit, IoCheck
from tests.task_fixture import F2P, P2P, demo_record

RECORD = demo_record("regrow/demo-repo:x")
ALL_PASS = {n: "passed" for n in [*F2P, *P2P]}
END = [{"exit_code": 0}]


def checks(*outcomes: tuple[str | None, str], result: str = "1") -> list[CheckResult]:
    """(the visible test that made the call or None, outcome) per check of clamp; each unseen call expects its own
    value, so that no single behaviour passes them all."""
    return [
        CheckResult(
            IoCheck(module="calc.ops", qualname="clamp", args=f"({n}, 0, 9)", result=result if t else str(n), test=t),
            o,  # type: ignore[arg-type]
            "",
        )
        for n, (t, o) in enumerate(outcomes)
    ]


def judged(*outcomes: tuple[str | None, str]) -> JudgedChecks:
    return JudgedChecks(checks(*outcomes), [])


def group_record():
    """The demo record as a group of two units: clamp and add, in the same module."""
    add = DeletedUnit(path="calc/ops.py", qualname="add", kind="function", start_line=4, end_line=5)
    return RECORD.model_copy(update={"deleted": [*RECORD.deleted, add]})


def add_checks(outcome: str) -> list[CheckResult]:
    return [
        CheckResult(IoCheck(module="calc.ops", qualname="add", args=f"({n}, 1)", result=str(n + 1)), outcome, "")  # type: ignore[arg-type]
        for n in range(2)
    ]


def test_a_unit_whose_secret_checks_all_agree_and_every_visible_test_passing_earns_one():
    found = score(
        RECORD, RunReport(ALL_PASS), judged((F2P[0], "passed"), (None, "passed"), (None, "passed")), "fraction"
    )
    assert (found.reward, found.f2p_passed, found.basis, found.tampered) == (1.0, 3, "checks", False)
    assert (found.units_credited, found.units_total, found.units[0].secret_total) == (1, 1, 2)


def test_a_unit_earns_nothing_unless_every_secret_check_agrees():
    """A stub right on some unseen inputs (`return value`, say) is no evidence: the unit earns all or nothing."""
    found = score(RECORD, RunReport(ALL_PASS), judged((None, "passed"), (None, "failed")), "fraction")
    assert found.reward == 0.0 and found.units[0].secret_passed == 1


def test_a_forged_report_adds_nothing_to_stubbed_units():
    """Every visible test reported passed (the report is the submission's own) while the replays disagree."""
    found = score(
        RECORD, RunReport(ALL_PASS), judged((F2P[0], "passed"), (None, "failed"), (None, "failed")), "fraction"
    )
    assert found.reward == 0.0 and found.f2p_passed == 3


def test_a_visible_tests_own_call_that_disagrees_takes_the_units_credit_and_never_gives_it():
    taken = score(
        RECORD, RunReport(ALL_PASS), judged((F2P[0], "failed"), (None, "passed"), (None, "passed")), "fraction"
    )
    assert taken.reward == 0.0 and taken.units[0].consistency_failed == 1
    # Consistency checks alone, however they pass, are no evidence: the task has no score.
    alone = score(RECORD, RunReport(ALL_PASS), judged((F2P[0], "passed"), (F2P[1], "passed")), "fraction")
    assert alone.reward == 0.0 and alone.basis == "undefined" and "no secret checks" in (alone.error or "")


def test_failing_visible_tests_only_scale_the_credit_down():
    failing = {**ALL_PASS, F2P[2]: "failed"}
    found = score(RECORD, RunReport(failing), judged((None, "passed"), (None, "passed")), "fraction")
    assert found.reward == pytest.approx(2 / 3)


def test_a_task_with_no_secret_check_has_no_score_not_a_full_one():
    found = score(RECORD, RunReport(ALL_PASS), JudgedChecks([], []), "fraction")
    assert (found.reward, found.basis) == (0.0, "undefined")


def test_secret_checks_that_one_behaviour_passes_are_no_evidence():
    """Two unseen calls that both expect 1 are met by `return 1`; two that both raise, by one exception class that
    inherits from everything the tests name."""
    same = checks((None, "passed"), (None, "passed"))
    same = [CheckResult(c.check.model_copy(update={"result": "1"}), "passed", "") for c in same]
    assert score(RECORD, RunReport(ALL_PASS), JudgedChecks(same, []), "fraction").basis == "undefined"
    raising = [
        CheckResult(IoCheck(module="calc.ops", qualname="clamp", args=f"({n}, 9, 0)", raises=name), "passed", "")
        for n, name in enumerate(["ValueError", "KeyError"])
    ]
    assert score(RECORD, RunReport(ALL_PASS), JudgedChecks(raising, []), "fraction").basis == "undefined"


def test_every_unit_of_a_group_earns_its_own_share_and_an_unchecked_unit_leaves_no_score():
    record = group_record()
    clamp_right = checks((None, "passed"), (None, "passed"))
    half = score(record, RunReport(ALL_PASS), JudgedChecks([*clamp_right, *add_checks("failed")], []), "fraction")
    assert half.reward == pytest.approx(0.5) and (half.units_credited, half.units_total) == (1, 2)
    full = score(record, RunReport(ALL_PASS), JudgedChecks([*clamp_right, *add_checks("passed")], []), "fraction")
    assert full.reward == 1.0
    unchecked = score(record, RunReport(ALL_PASS), JudgedChecks(clamp_right, []), "fraction")
    assert unchecked.reward == 0.0 and unchecked.basis == "undefined" and "calc/ops.py::add" in (unchecked.error or "")


def test_a_forged_check_channel_earns_nothing_and_says_so():
    found = score(
        RECORD, RunReport(ALL_PASS), JudgedChecks(checks((None, "passed"), (None, "passed")), [0]), "fraction"
    )
    assert found.reward == 0.0 and found.tampered and found.tamper_reasons == ["check_records_forged"]


def test_a_run_without_its_own_end_is_an_error_that_pays_nothing():
    forged = [{"nodeid": n, "outcome": "passed"} for n in [*F2P, *P2P]]
    for records, exit_code in ((forged, 0), ([*forged, *END, {"nodeid": F2P[0], "outcome": "passed"}], 0),
                               ([*forged, *END], 3), ([*forged, *END, *END], 0)):  # fmt: skip
        report = RunReport.of(records, None, exit_code)
        assert report.error and "did not end on its own" in report.error
        found = score(RECORD, report, judged((None, "passed"), (None, "passed")), "fraction")
        assert found.reward == 0.0
    assert RunReport.of([*forged, *END], None, 0).error is None


def test_tests_of_a_file_that_cannot_be_collected_erred():
    file = F2P[0].split("::")[0]
    report = RunReport.of([{"collect_error": file}, *END], None)
    assert {report.outcome(n) for n in F2P} == {"error"}
    assert report.outcome("tests/test_other.py::test_x") == "missing"
    assert RunReport.of([{"collect_error": ""}, *END], None).outcome(F2P[0]) == "missing"  # no collector named


def test_a_broken_pass_to_pass_test_costs_the_reward_and_binary_pays_only_for_everything():
    broken = {**ALL_PASS, P2P[0]: "failed"}
    right = judged((None, "passed"), (None, "passed"))
    assert score(RECORD, RunReport(broken), right, "fraction").reward == 0.0
    assert score(RECORD, RunReport(ALL_PASS), right, "binary").reward == 1.0
    assert score(RECORD, RunReport({**ALL_PASS, F2P[0]: "failed"}), right, "binary").reward == 0.0
    assert (
        score(
            group_record(), RunReport(ALL_PASS), JudgedChecks([*right.results, *add_checks("failed")], []), "binary"
        ).reward
        == 0.0
    )


def test_the_end_of_episode_hint_names_failing_tests_and_the_units_whose_checks_disagree():
    found = score(
        RECORD, RunReport({**ALL_PASS, F2P[0]: "failed"}), judged((None, "passed"), (None, "failed")), "fraction"
    )
    hint = failing_summary(found) or ""
    assert F2P[0] in hint and "calc/ops.py::clamp (1 of 2)" in hint
    assert (
        failing_summary(score(RECORD, RunReport(ALL_PASS), judged((None, "passed"), (None, "passed")), "fraction"))
        is None
    )


def test_a_test_child_report_keeps_each_tests_first_phase_that_did_not_pass():
    report = RunReport.of(
        [
            {"nodeid": "a", "outcome": "passed"},
            {"nodeid": "a", "outcome": "error"},
            {"nodeid": "a", "outcome": "passed"},
        ]
        + [{"nodeid": "b", "outcome": "bogus"}, {"exit_code": 0}],
        None,
    )
    assert report.outcomes == {"a": "error"}


def test_the_grading_timeout_follows_the_suites_measured_time_within_the_cap():
    limits = GradeLimits(timeout_s=300, timeout_factor=3, timeout_slack_s=30, min_timeout_s=30)

    def task(baseline):
        return SimpleNamespace(record=SimpleNamespace(stats=SimpleNamespace(baseline_s=baseline)))

    assert grading_timeout(task(2.0), limits) == 36.0  # type: ignore[arg-type]
    assert grading_timeout(task(0.1), limits) == 30.3  # type: ignore[arg-type]
    assert grading_timeout(task(500.0), limits) == 300  # type: ignore[arg-type]
    assert grading_timeout(task(None), limits) == 300  # type: ignore[arg-type]
