"""The verdict without an engine: how the two runs' reports and the server's check verdicts become a reward."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from env_server.grading.checks import CheckResult
from env_server.grading.submission import grading_timeout
from env_server.grading.verdict import RunReport, score
from env_server.settings import GradeLimits
from proto.tasks import IoCheck
from tests.task_fixture import F2P, P2P, demo_record

RECORD = demo_record("regrow/demo-repo:x")
ALL_PASS = {n: "passed" for n in [*F2P, *P2P]}
STUB_FAILS = {n: "failed" for n in F2P}


def checks(*outcomes: tuple[str | None, str]) -> list[CheckResult]:
    """(the visible test that made the call or None, outcome) per check."""
    return [
        CheckResult(IoCheck(module="calc.ops", qualname="clamp", args="(1, 0, 2)", result="1", test=t), o, "")  # type: ignore[arg-type]
        for t, o in outcomes
    ]


def test_every_visible_test_credited_and_every_check_passing_earns_one():
    found = score(
        RECORD, RunReport(ALL_PASS), RunReport(STUB_FAILS), checks((F2P[0], "passed"), (None, "passed")), "fraction"
    )
    assert (found.reward, found.f2p_passed, found.basis, found.tampered) == (1.0, 3, "checks", False)


def test_unseen_checks_scale_the_credit_of_the_visible_tests():
    found = score(
        RECORD, RunReport(ALL_PASS), RunReport(STUB_FAILS), checks((None, "passed"), (None, "failed")), "fraction"
    )
    assert found.reward == pytest.approx(0.5)


def test_a_visible_pass_whose_own_replay_disagrees_is_not_credited():
    found = score(RECORD, RunReport(ALL_PASS), RunReport(STUB_FAILS), checks((F2P[0], "failed")), "fraction")
    assert found.f2p_passed == 2 and found.reward == pytest.approx(2 / 3)


def test_passes_that_survive_the_stub_are_a_forgery():
    found = score(RECORD, RunReport(ALL_PASS), RunReport(ALL_PASS), checks((None, "passed")), "fraction")
    assert found.reward == 0.0 and found.tampered and found.tamper_reasons == ["counterfactual_passed"]


def test_tests_of_a_file_the_stub_keeps_from_importing_erred_and_are_credited():
    """A deletion that breaks a test file's import (a name it uses at module level) leaves no report per test, only
    the file's collection error: synthesis counted those tests as failing, so the counterfactual must too."""
    file = F2P[0].split("::")[0]
    records = [{"collect_error": file}, *({"nodeid": n, "outcome": "failed"} for n in F2P if not n.startswith(file))]
    counter = RunReport.of(records, None)
    assert {counter.outcome(n) for n in F2P if n.startswith(file)} == {"error"}
    assert counter.outcome("tests/test_other.py::test_x") == "missing"
    found = score(RECORD, RunReport(ALL_PASS), counter, checks((None, "passed")), "fraction")
    assert (found.reward, found.f2p_passed) == (1.0, 3)
    assert RunReport.of([{"collect_error": ""}], None).outcome(F2P[0]) == "missing"  # no collector named: nothing


def test_a_dead_counterfactual_leaves_the_checks_to_decide_and_pays_nothing_without_them():
    dead = RunReport(error="the tests ran past 30s")
    with_checks = score(RECORD, RunReport(ALL_PASS), dead, checks((None, "passed")), "fraction")
    assert with_checks.reward == 1.0 and "counterfactual" in (with_checks.error or "")
    assert score(RECORD, RunReport(ALL_PASS), dead, [], "fraction").reward == 0.0


def test_a_broken_pass_to_pass_test_costs_the_reward_and_binary_pays_only_for_everything():
    broken = {**ALL_PASS, P2P[0]: "failed"}
    assert score(RECORD, RunReport(broken), RunReport(STUB_FAILS), [], "fraction").reward == 0.0
    partial = checks((None, "passed"), (None, "failed"))
    assert score(RECORD, RunReport(ALL_PASS), RunReport(STUB_FAILS), partial, "binary").reward == 0.0


def test_a_task_without_checks_is_graded_on_its_visible_tests_and_says_so():
    found = score(RECORD, RunReport(ALL_PASS), RunReport(STUB_FAILS), [], "fraction")
    assert found.basis == "visible_tests" and found.reward == 1.0


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
