"""The reward of one grading, from the two runs' test reports and the server's verdicts on the out-of-process checks.

The visible tests are the precondition: a broken PASS_TO_PASS test costs the reward, and a FAIL_TO_PASS test is
credited only if it passes, fails with the unit put back as the task's stub, and the replays of its own calls agree
with the original. The replays of calls no visible test makes then scale the credit: they are the proof, since their
expected outcomes never entered a container.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from env_server.grading.checks import CheckResult
from env_server.grading.pytest_command import Outcome
from proto.observations import RewardDetails, RewardMode, TestOutcome
from proto.tasks import TaskRecord


@dataclass
class RunReport:
    """Outcomes of one run's visible tests, or why there are none."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    error: str | None = None
    uncollected: tuple[str, ...] = ()  # collectors (test files, folders) that failed to import

    @classmethod
    def of(cls, records: list[dict[str, Any]], error: str | None) -> RunReport:
        """From the test child's records: a test's outcome is its first phase that did not pass."""
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


def score(
    record: TaskRecord, main: RunReport, counter: RunReport, checks: list[CheckResult], mode: RewardMode
) -> RewardDetails:
    """The reward and its details."""
    tests = [TestOutcome(nodeid=n, outcome=main.outcome(n), group="FAIL_TO_PASS") for n in record.FAIL_TO_PASS]
    tests += [TestOutcome(nodeid=n, outcome=main.outcome(n), group="PASS_TO_PASS") for n in record.PASS_TO_PASS]
    tests += [
        TestOutcome(nodeid=f"hidden::{c.check.module}.{c.check.qualname} #{n}", outcome=c.outcome, group="HIDDEN")
        for n, c in enumerate(checks, 1)
    ]
    basis = "checks" if checks else "visible_tests"
    hidden_passed = sum(c.outcome == "passed" for c in checks)
    base = RewardDetails(
        reward=0.0,
        mode=mode,
        f2p_passed=0,
        f2p_total=len(record.FAIL_TO_PASS),
        p2p_passed=sum(t.outcome == "passed" for t in tests if t.group == "PASS_TO_PASS"),
        p2p_total=len(record.PASS_TO_PASS),
        tests=tests,
        hidden_passed=hidden_passed,
        hidden_total=len(checks),
        basis=basis,
    )
    if main.error:  # a run that timed out or died earns nothing; it is no evidence of forgery by itself
        return base.model_copy(update={"error": main.error})
    passed = [n for n in record.FAIL_TO_PASS if main.outcome(n) == "passed"]
    if counter.error:  # nothing shows the passes came from the unit; only the out-of-process checks can
        credited = passed if checks else []
    else:
        credited = [n for n in passed if counter.outcome(n) in ("failed", "error")]
        if passed and all(counter.outcome(n) == "passed" for n in passed):
            return base.model_copy(update={"tampered": True, "tamper_reasons": ["counterfactual_passed"]})
    # A visible test whose own calls, replayed out of process, come out otherwise is not credited.
    disagreeing = {c.check.test for c in checks if not c.unseen and c.outcome != "passed"}
    credited = [n for n in credited if n not in disagreeing]
    unseen = [c for c in checks if c.unseen]
    general = sum(c.outcome == "passed" for c in unseen) / len(unseen) if unseen else 1.0
    intact = base.p2p_passed == len(record.PASS_TO_PASS)
    f2p_total = len(record.FAIL_TO_PASS)
    if mode == "binary":
        reward = float(intact and len(credited) == f2p_total and hidden_passed == len(checks))
    else:
        reward = len(credited) / f2p_total * general if intact and f2p_total else 0.0
    return base.model_copy(
        update={
            "reward": reward,
            "f2p_passed": len(credited),
            "error": counter.error and f"counterfactual run: {counter.error}",
        }
    )


def failing_summary(details: RewardDetails, limit: int = 5) -> str | None:
    """The end-of-episode hint: forgery found, which tests still fail, or what stopped the grading."""
    if details.tampered:
        return (
            "reward 0: the test run was forged: the visible tests passed with the unit put back as the stub "
            f"({', '.join(details.tamper_reasons)})"
        )
    if details.error:
        return f"grading failed: {details.error}"
    failing = [t for t in details.tests if t.outcome != "passed"]
    if not failing:
        return None
    names = ", ".join(f"{t.nodeid} ({t.outcome})" for t in failing[:limit])
    more = f" and {len(failing) - limit} more" if len(failing) > limit else ""
    return f"{len(failing)} of {len(details.tests)} tests fail: {names}{more}"
