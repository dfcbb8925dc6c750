"""SDPO's teacher: the policy itself shown the env's hint, without gradient.

It can be the live weights, an exponential moving average of them, or the initial weights. The
teacher context of a hinted turn is the student's exact token prefix, then the hint message, then
the generation prompt and the same turn tokens.
"""

import copy
from dataclasses import dataclass
from enum import Enum

import torch

from trainer_client.policy_forward import last_token_logits


class TeacherWeights(str, Enum):
    live = "live"
    ema = "ema"
    initial = "initial"


@dataclass(frozen=True)
class HintedTurn:
    """A turn that followed env feedback; offsets index the row's completion ids."""

    hint_at: int  # where the hint message goes (after the tool response, before the generation prompt)
    start: int
    end: int
    hint_ids: tuple[int, ...]


def teacher_context(prompt: list[int], completion: list[int], turn: HintedTurn, end: int) -> list[int]:
    """The teacher's ids for one hinted turn, ending with that turn's tokens up to `end`."""
    return prompt + completion[: turn.hint_at] + list(turn.hint_ids) + completion[turn.hint_at : end]


class SDPOTeacher:
    """Runs the teacher forward; keeps its own copy of the weights unless it is the live policy."""

    def __init__(self, weights: TeacherWeights, policy: torch.nn.Module, ema_decay: float = 0.99):
        if not 0.0 < ema_decay < 1.0:
            raise ValueError(f"the EMA decay must be in (0, 1), got {ema_decay}")
        self.weights = TeacherWeights(weights)
        self.ema_decay = ema_decay
        self._copy = None
        if self.weights is not TeacherWeights.live:
            self._copy = copy.deepcopy(policy).requires_grad_(False).eval()

    def model(self, policy: torch.nn.Module) -> torch.nn.Module:
        if self._copy is None:
            return policy
        device = next(policy.parameters()).device
        if next(self._copy.parameters()).device != device:
            self._copy.to(device)
        return self._copy

    @torch.no_grad()
    def update(self, policy: torch.nn.Module) -> None:
        """After an optimizer step: move an EMA teacher towards the policy; the others stay as they are."""
        if self.weights is not TeacherWeights.ema:
            return
        teacher = self.model(policy)
        for mine, theirs in zip(teacher.parameters(), policy.parameters(), strict=True):
            mine.lerp_(theirs.detach().to(mine.dtype), 1.0 - self.ema_decay)

    @torch.no_grad()
    def logits(
        self, policy: torch.nn.Module, rows: list[list[int]], counts: list[int], pad_token_id: int, temperature: float
    ) -> torch.Tensor:
        """Teacher logits predicting the last `counts[i]` tokens of each row: (sum(counts), V)."""
        return last_token_logits(self.model(policy), rows, counts, pad_token_id, temperature)
