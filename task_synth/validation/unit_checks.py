"""Each deleted unit's own checks: chosen unit by unit, budgeted per unit, measured per unit by its own mutants.

A group of six units gets six units' checks, not one task's. A unit's strength counts the mutants of that unit that
its own checks kill; a mutant that some call tells apart but none of the unit's checks does survives (a mutant no
call at all tells apart is equivalent, as far as synthesis can see). The grader credits a unit only through its
secret checks (proto.evidence), so a unit whose checks are no such evidence is reported here and not deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from proto.evidence import expected_outcome, has_secret_evidence, unit_key, unit_of
from proto.tasks import DeletedUnit, IoCheck
from task_synth.validation.recorded_calls import MAX_CHECKS, Call, CallKey, check_key, selected_checks
from task_synth.validation.task_strength import Strength, measured_strength, strongest
from task_synth.validation.unseen_calls import MAX_UNSEEN, unseen_checks

# For each mutant: the unit it mutates (proto.evidence.unit_key) and the keys of the calls whose outcome it changes.
UnitKills = list[tuple[str, set[CallKey]]]
# The kill set of a mutant on a line no call runs: a key no check has, so the mutant survives every choice of checks
# instead of counting as equivalent (a mutant that calls run and none tells apart).
UNREACHED: CallKey = ("", "", "no call runs this line", "")


@dataclass
class UnitChecks:
    """The checks chosen for every unit, each unit's strength, and the units left with no secret evidence."""

    checks: list[IoCheck] = field(default_factory=list)
    strengths: dict[str, Strength | None] = field(default_factory=dict)
    without_evidence: list[str] = field(default_factory=list)

    def weakest(self) -> tuple[str, Strength] | None:
        """The unit whose checks kill the smallest share of its mutants; None when no unit's could be judged."""
        judged = [(key, s) for key, s in self.strengths.items() if s is not None and s.kill_rate is not None]
        return min(judged, key=lambda item: item[1].kill_rate or 0.0, default=None)

    def weak(self, min_kill_rate: float) -> list[str]:
        """The units whose own checks kill less than `min_kill_rate` of their mutants."""
        return [key for key, s in self.strengths.items() if s is not None and (s.kill_rate or 0.0) < min_kill_rate]

    def total(self, seconds: float) -> Strength | None:
        """Every unit's mutants together, for the task's stats."""
        known = [s for s in self.strengths.values() if s is not None]
        if not known:
            return None
        return Strength(
            sum(s.mutants for s in known), sum(s.equivalent for s in known), sum(s.killed for s in known), seconds
        )


def chosen_for_units(
    units: Sequence[DeletedUnit], linked: list[Call], unseen: list[Call], kills: UnitKills | None, seconds: float
) -> UnitChecks:
    """Up to MAX_CHECKS linked and MAX_UNSEEN unseen checks for each unit, chosen to kill its own mutants."""
    found = UnitChecks()
    for unit in units:
        key = unit_key(unit)
        mine_linked = [call for call in linked if _owner(call, units) == key]
        mine_unseen = [call for call in unseen if _owner(call, units) == key]
        own_kills = None if kills is None else [killed for owner, killed in kills if owner == key]
        spread = {check_key(check): check for check in selected_checks(mine_linked, len(mine_linked))}
        chosen_linked = [spread[k] for k in strongest(list(spread), [], own_kills or None, MAX_CHECKS)]
        ranked = {check_key(check): check for check in unseen_checks(mine_unseen, mine_linked, len(mine_unseen))}
        linked_keys = [check_key(check) for check in chosen_linked]
        chosen_unseen = [ranked[k] for k in strongest(list(ranked), linked_keys, own_kills or None, MAX_UNSEEN)]
        chosen_unseen = with_evidence(chosen_unseen, list(ranked.values()))
        mine = chosen_linked + chosen_unseen
        found.checks += mine
        found.strengths[key] = measured_strength(own_kills or None, [check_key(c) for c in mine], seconds)
        if not has_secret_evidence(mine):
            found.without_evidence.append(key)
    return found


def with_evidence(chosen: list[IoCheck], candidates: list[IoCheck]) -> list[IoCheck]:
    """`chosen`, with its last checks traded for candidates whose outcome it lacks until no single behaviour passes
    them all (proto.evidence), where the candidates allow; the same number of checks."""
    chosen = list(chosen)
    for candidate in candidates:
        if has_secret_evidence(chosen):
            break
        outcomes = {expected_outcome(check) for check in chosen}
        returns = any(check.raises is None for check in chosen)
        new = expected_outcome(candidate) not in outcomes and (returns or candidate.raises is None)
        if not new or candidate in chosen:
            continue
        keep = _kept_for_evidence(chosen)
        drop = next((index for index in range(len(chosen) - 1, -1, -1) if index not in keep), None)
        if drop is None or len(chosen) < MAX_UNSEEN:
            chosen.append(candidate)
        else:
            chosen[drop] = candidate
    return chosen


def _kept_for_evidence(chosen: list[IoCheck]) -> set[int]:
    """The indexes of the first check of each outcome: trading one of them away would lose an outcome."""
    first: dict[object, int] = {}
    for index, check in enumerate(chosen):
        first.setdefault(expected_outcome(check), index)
    return set(first.values())


def _owner(call: Call, units: Sequence[DeletedUnit]) -> str | None:
    unit = unit_of(call.check, units)
    return None if unit is None else unit_key(unit)
