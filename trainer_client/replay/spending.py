"""The spending cap: every paid call reserves its worst case first, so the cap is never passed."""

import threading
from dataclasses import dataclass


class BudgetExhausted(RuntimeError):
    """The next call could pass the spending cap; the run stops cleanly instead."""


@dataclass
class Reservation:
    """Money set aside for one call until its real cost is known."""

    amount_usd: float


class SpendingCap:
    """Tracks money spent and reserved against an optional cap (None means no cap)."""

    def __init__(self, cap_usd: float | None) -> None:
        self.cap_usd = cap_usd
        self.spent_usd = 0.0
        self._reserved_usd = 0.0
        self._lock = threading.Lock()

    def reserve(self, worst_case_usd: float) -> Reservation:
        """Set aside `worst_case_usd`, or raise BudgetExhausted if that could pass the cap."""
        with self._lock:
            if self.cap_usd is not None and self.spent_usd + self._reserved_usd + worst_case_usd > self.cap_usd:
                raise BudgetExhausted(
                    f"spending cap ${self.cap_usd:.4f} reached (spent ${self.spent_usd:.4f}, "
                    f"in flight ${self._reserved_usd:.4f}); raise max_cost_usd in teachers.yaml to go on"
                )
            self._reserved_usd += worst_case_usd
            return Reservation(worst_case_usd)

    def settle(self, reservation: Reservation, actual_usd: float) -> None:
        """Release a reservation and book what the call really cost."""
        with self._lock:
            self._reserved_usd -= reservation.amount_usd
            self.spent_usd += actual_usd
