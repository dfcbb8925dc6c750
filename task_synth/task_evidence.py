"""What validation's last checks of a task found, handed to the store: why the task is rejected, or the evidence its
record carries. validation/task_checks.py fills it and store/task_builder.py writes from it; it sits below both rooms,
so that the store imports nothing from validation."""

from __future__ import annotations

from dataclasses import dataclass, field

from proto.tasks import IoCheck, UnitKillRate


@dataclass
class TaskEvidence:
    """What a kept task's record carries of validation's findings: its tests, its hidden checks and their strength.

    `io_checks` go to the task store's hidden files only, never into the record.
    """

    fail_to_pass: list[str]
    pass_to_pass: list[str]
    covering_tests: int
    io_checks: list[IoCheck]
    pytest_plugins: list[str] | None
    baseline_s: float | None  # how long F2P + P2P took with the solution: the grader's time limit follows it
    unit_kill_rates: list[UnitKillRate]  # each unit's kill rate by its own checks
    mutants: int = 0
    mutants_equivalent: int = 0
    mutant_kill_rate: float | None = None  # None where no mutant could be judged
    mutation_s: float = 0.0


@dataclass
class CheckedTask:
    """The outcome of a finished task's checks: a rejection with its detail, or the evidence to keep it on."""

    rejection: str | None
    test_executions: int
    detail: str = ""
    # For no_evidence, the units no secret check can judge; for weak_checks, those whose checks kill too few mutants.
    unchecked: list[str] = field(default_factory=list)
    evidence: TaskEvidence | None = None
