"""Which recorded checks are evidence for which deleted unit, and when a unit's evidence is secret enough to pay.

Synthesis deletes no unit without such evidence and the grader credits a unit only through it, so both read this one
rule. A check is *secret* when no visible test makes its call: its expected outcome never enters a container. A
check of a call a visible test makes is a *consistency* check: its answer can be read in the workspace, so it may
take credit away and never gives it. A unit's secret checks are evidence when no single behaviour passes them all:
they expect at least two different outcomes, and at least one of them returns (an exception class built to inherit
from every class the tests name passes any check that expects a raise).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from proto.tasks import DeletedUnit, IoCheck

MIN_SECRET_OUTCOMES = 2


def unit_key(unit: DeletedUnit) -> str:
    """A deleted unit's name in a task: its file and qualified name."""
    return f"{unit.path}::{unit.qualname}"


def module_of_path(path: str) -> str:
    """The dotted name a file's path spells (`src/calc/ops.py` -> `src.calc.ops`, a package's `__init__.py` its
    folder); an import root above it (`src/`) is left on, so match names by their end."""
    stem = path[:-3] if path.endswith(".py") else path
    stem = stem.removesuffix("/__init__")
    return stem.replace("/", ".")


def _same_module(path: str, module: str) -> bool:
    dotted = module_of_path(path)
    return dotted == module or dotted.endswith(f".{module}")


def unit_of(check: IoCheck, units: Sequence[DeletedUnit]) -> DeletedUnit | None:
    """The deleted unit a check calls: the one of its module with its qualified name, or its deleted module."""
    for unit in units:
        if _same_module(unit.path, check.module) and (unit.qualname == check.qualname or unit.kind == "module"):
            return unit
    return None


def checks_by_unit(checks: Iterable[IoCheck], units: Sequence[DeletedUnit]) -> dict[str, list[IoCheck]]:
    """Every unit's checks by its key, each unit listed (one with no check has an empty list); a check that calls
    none of the units is in none."""
    found: dict[str, list[IoCheck]] = {unit_key(unit): [] for unit in units}
    for check in checks:
        unit = unit_of(check, units)
        if unit is not None:
            found[unit_key(unit)].append(check)
    return found


def is_secret(check: IoCheck) -> bool:
    """Whether no visible test makes the check's call, so that its expected outcome is nowhere in the workspace."""
    return check.test is None


def expected_outcome(check: IoCheck) -> tuple[str | None, str | None, str | None, str | None]:
    """What a check expects, as the texts that must agree: the value (a class's step outcomes), the exception's
    class, the state after and the arguments after."""
    return (None if check.raises else check.result, check.raises, check.state, check.args_after)


def has_secret_evidence(checks: Iterable[IoCheck]) -> bool:
    """Whether a unit's checks hold secret ones that no single behaviour passes: two outcomes or more, one that
    returns among them."""
    secret = [check for check in checks if is_secret(check)]
    outcomes = {expected_outcome(check) for check in secret}
    return len(outcomes) >= MIN_SECRET_OUTCOMES and any(check.raises is None for check in secret)


def units_without_evidence(checks: Iterable[IoCheck], units: Sequence[DeletedUnit]) -> list[str]:
    """The keys of the units whose checks are no secret evidence, in the task's order."""
    by_unit = checks_by_unit(checks, units)
    return [key for key, own in by_unit.items() if not has_secret_evidence(own)]
