"""The reward of one grading, from the server's verdicts on the out-of-process checks, unit by unit, with the test
run's report as a precondition.

Credit comes only from evidence whose expected outcome the submission cannot know: a deleted unit earns its share
when every replay of a call no visible test makes agrees with the original (proto.evidence says when those are
evidence at all) and no replay of a visible test's own call disagrees. The test report, written by a process that
ran the submission, can only take credit away: a broken PASS_TO_PASS test costs all of it, and the share of
FAIL_TO_PASS tests that do not pass scales it down. A task with a unit no secret check can judge has no score.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from env_server.grading.checks import CheckResult, JudgedChecks
from env_server.grading.pytest_command import Outcome
from proto.evidence import checks_by_unit, has_secret_evidence
from proto.observations import RewardDetails, RewardMode, TestOutcome, UnitCredit
from proto.tasks import DeletedUnit, TaskRecord


@dataclass
class RunReport:
    """Outcomes of one run's visible tests, or why there are none."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    error: str | None = None
    uncollected: tuple[str, ...] = ()  # collectors (test files, folders) that failed to import

    @classmethod
    def of(cls, records: list[dict[str, Any]], error: str | None, child_exit: int | None = 0) -> RunReport:
        """From the test child's records: a test's outcome is its first phase that did not pass. A run that did not
        end on its own (its last record is not its one end-of-run record, or the child's exit is not clean) is an
        error: code under test that reported and then left the run has no report that counts."""
        ends = [index for index, record in enumerate(records) if "exit_code" in record]
        if error is None and (ends != [len(records) - 1] or child_exit != 0):
            how = "no end-of-run record" if not ends else "records after its end" if len(ends) == 1 else "two ends"
            error = f"the test run did not end on its own ({how}, child exit {child_exit})"
        outcomes: dict[str, Outcome] = {}
        uncollected: list[str] = []
        for record in records:
            nodeid, outcome = record.get("nodeid"), record.get("outcome")
            if isinstance(nodeid, str) and outcome in ("passed", "failed", "error", "skipped"):
                if outcomes.get(nodeid, "passed") == "passed":
                    outcomes[nodeid] = outcome
            elif isinstance(record.get("collect_error"), str) and record["collect_error"]:
                uncollected.append(record["collect_error"])
        return cls(outcomes, error, tuple(uncollected))

    def outcome(self, nodeid: str) -> Outcome:
        """A test's outcome; one in a file that could not be collected erred (synthesis counted it as failing too)."""
        if nodeid in self.outcomes:
            return self.outcomes[nodeid]
        inside = any(nodeid.startswith((f"{collector}::", f"{collector}/")) for collector in self.uncollected)
        return "error" if inside else "missing"


def score(record: TaskRecord, main: RunReport, judged: JudgedChecks, mode: RewardMode) -> RewardDetails:
    """The reward and its details: the share of units whose secret checks agree, scaled down by the visible
    tests' failures, and 0 where a PASS_TO_PASS test broke, the run did not end as its own, or a report was forged."""
    checks = judged.results
    tests = [TestOutcome(nodeid=n, outcome=main.outcome(n), group="FAIL_TO_PASS") for n in record.FAIL_TO_PASS]
    tests += [TestOutcome(nodeid=n, outcome=main.outcome(n), group="PASS_TO_PASS") for n in record.PASS_TO_PASS]
    tests += [
        TestOutcome(nodeid=f"hidden::{c.check.module}.{c.check.qualname} #{n}", outcome=c.outcome, group="HIDDEN")
        for n, c in enumerate(checks, 1)
    ]
    units = unit_credits(record.deleted, checks)
    f2p_passed = sum(main.outcome(n) == "passed" for n in record.FAIL_TO_PASS)
    secret = [c for c in checks if c.unseen]
    base = RewardDetails(
        reward=0.0,
        mode=mode,
        f2p_passed=f2p_passed,
        f2p_total=len(record.FAIL_TO_PASS),
        p2p_passed=sum(t.outcome == "passed" for t in tests if t.group == "PASS_TO_PASS"),
        p2p_total=len(record.PASS_TO_PASS),
        tests=tests,
        hidden_passed=sum(c.outcome == "passed" for c in secret),
        hidden_total=len(secret),
        basis="checks" if units and all(unit.evidence for unit in units) else "undefined",
        units_credited=sum(unit.credited for unit in units),
        units_total=len(units),
        units=units,
    )
    if judged.forged:
        reasons = ["check_records_forged"]
        return base.model_copy(update={"tampered": True, "tamper_reasons": reasons, "units_credited": 0})
    if main.error:  # a run that timed out or died earns nothing; it is no evidence of forgery by itself
        return base.model_copy(update={"error": main.error})
    if base.basis == "undefined":
        missing = ", ".join(unit.unit for unit in units if not unit.evidence) or "every unit"
        return base.model_copy(update={"error": f"no secret checks can judge {missing}: this task has no score"})
    intact = base.p2p_passed == base.p2p_total
    if mode == "binary":
        reward = float(intact and f2p_passed == base.f2p_total and base.units_credited == base.units_total)
    else:
        f2p_share = f2p_passed / base.f2p_total if base.f2p_total else 1.0
        reward = base.units_credited / base.units_total * f2p_share if intact else 0.0
    return base.model_copy(update={"reward": reward})


def unit_credits(deleted: list[DeletedUnit], checks: list[CheckResult]) -> list[UnitCredit]:
    """Each deleted unit's credit: every one of its secret checks agrees and none of its consistency checks
    disagrees, and its secret checks are evidence (proto.evidence) at all."""
    by_check = {id(result.check): result for result in checks}
    found = []
    for key, own in checks_by_unit([result.check for result in checks], deleted).items():
        results = [by_check[id(check)] for check in own]
        secret = [result for result in results if result.unseen]
        evidence = has_secret_evidence(own)
        failed = sum(result.outcome != "passed" for result in results if not result.unseen)
        passed = sum(result.outcome == "passed" for result in secret)
        found.append(
            UnitCredit(
                unit=key,
                credited=evidence and not failed and passed == len(secret),
                secret_passed=passed,
                secret_total=len(secret),
                consistency_failed=failed,
                evidence=evidence,
            )
        )
    return found


def failing_summary(details: RewardDetails, limit: int = 5) -> str | None:
    """The end-of-episode hint: forgery found, what stopped the grading, which tests still fail, or which units'
    hidden checks disagree."""
    if details.tampered:
        return f"reward 0: the grading was forged ({', '.join(details.tamper_reasons)})"
    if details.error:
        return f"grading failed: {details.error}"
    failing = [t for t in details.tests if t.outcome != "passed" and t.group != "HIDDEN"]
    wrong = [unit for unit in details.units if not unit.credited]
    if not failing and not wrong:
        return None
    parts = []
    if failing:
        names = ", ".join(f"{t.nodeid} ({t.outcome})" for t in failing[:limit])
        more = f" and {len(failing) - limit} more" if len(failing) > limit else ""
        parts.append(f"{len(failing)} of {details.f2p_total + details.p2p_total} tests fail: {names}{more}")
    if wrong:
        shown = ", ".join(f"{u.unit} ({u.secret_passed} of {u.secret_total})" for u in wrong[:limit])
        parts.append(f"hidden checks disagree for {len(wrong)} of {details.units_total} units: {shown}")
    return "; ".join(parts)
