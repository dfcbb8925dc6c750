"""How strong a task's checks are: the share of the unit's mutants they tell apart from the original, and the checks
chosen to tell apart the most.

A mutant no recorded or probed call tells apart is counted as equivalent (as far as any call synthesis found can
see); the kill rate is over the others. Calls are named by a hashable key.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Strength:
    """The mutation measure of one task's checks."""

    mutants: int
    equivalent: int
    killed: int
    seconds: float

    @property
    def kill_rate(self) -> float | None:
        """The share of the non-equivalent mutants the checks kill; None when every mutant seemed equivalent."""
        judged = self.mutants - self.equivalent
        return self.killed / judged if judged else None


def strongest(ranked: Sequence[Key], chosen: Sequence[Key], kills: Sequence[set[Key]] | None, limit: int) -> list[Key]:
    """Up to `limit` of the calls `ranked`: first, one at a time, the call that kills the most mutants that neither
    `chosen` nor a call picked so far kills (ties go to the earlier in `ranked`); then the rest in `ranked`'s order."""
    picked: list[Key] = []
    alive = [mutant for mutant in kills or () if not mutant & set(chosen)]
    while alive and len(picked) < limit:
        best = max(ranked, key=lambda key: (sum(key in mutant for mutant in alive), -ranked.index(key)), default=None)
        if best is None or not any(best in mutant for mutant in alive) or best in picked:
            break
        picked.append(best)
        alive = [mutant for mutant in alive if best not in mutant]
    return picked + [key for key in ranked if key not in picked][: limit - len(picked)]


def measured_strength(kills: Sequence[set[Key]] | None, chosen: Sequence[Key], seconds: float) -> Strength | None:
    """How many mutants there were, how many seemed equivalent, and how many the `chosen` calls kill."""
    if kills is None:
        return None
    chosen_set = set(chosen)
    equivalent = sum(not mutant for mutant in kills)
    killed = sum(bool(mutant & chosen_set) for mutant in kills)
    return Strength(len(kills), equivalent, killed, round(seconds, 3))
