"""SDPO's teacher: the policy itself shown the env's hint, without gradient.

It can be the live weights, an exponential moving average of them, or the initial weights. The
teacher context of a hinted turn is the student's exact token prefix, then the hint message (the
env's feedback on that same turn), then the generation prompt and the turn's tokens. With live
weights, the student's forward already holds the keys and values of that prefix, so the teacher
runs only the hint and the turn.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, cast

import torch

from trainer_client.policy.lora_adapter import adapter_parameters, adapter_weights, is_adapted
from trainer_client.policy.policy_forward import head_logits, last_token_logits
from trainer_client.policy.prefix_cache import Prefix, continue_prefix
from trainer_client.rollout.rows import HintedTurn

if TYPE_CHECKING:  # annotations only: importing it loads transformers' modeling code, about a second
    from transformers import PreTrainedModel


# Hinted turns a teacher forward takes at once: continued from the student's keys and values, or whole.
LIVE_ROWS_PER_PASS = 8
ROWS_PER_PASS = 4


class TeacherWeights(str, Enum):
    live = "live"
    ema = "ema"
    initial = "initial"


@dataclass(frozen=True)
class TeacherRow:
    """One hinted turn as the teacher reads it: a batch row's context up to the hint, then the hint and the turn."""

    row: int  # the batch row the student read
    context_columns: int  # that row's columns before the hint (prompt width + hint_at)
    context: list[int]  # the real ids of those columns
    continuation: list[int]  # the hint, the generation prompt, then the turn's tokens
    count: int  # distilled tokens: the last `count` of the continuation

    @property
    def ids(self) -> list[int]:
        return self.context + self.continuation


def teacher_row(
    row: int, prompt_width: int, prompt: list[int], completion: list[int], turn: HintedTurn, end: int
) -> TeacherRow:
    """The teacher's input for one hinted turn of a batch row, distilling that turn's tokens up to `end`."""
    if not turn.hint_ids:
        raise ValueError("a hinted turn needs the hint message's token ids; the chat template rendered none")
    cut = len(prompt) + turn.hint_at
    if not 0 < cut <= len(prompt) + turn.start:
        raise ValueError(f"hint position {turn.hint_at} is outside the context of the turn starting at {turn.start}")
    ids = prompt + completion[:end]
    return TeacherRow(
        row=row,
        context_columns=prompt_width + turn.hint_at,
        context=ids[:cut],
        continuation=list(turn.hint_ids) + ids[cut:],
        count=end - turn.start,
    )


def teacher_context(prompt: list[int], completion: list[int], turn: HintedTurn, end: int) -> list[int]:
    """The teacher's ids for one hinted turn, ending with that turn's tokens up to `end`."""
    return teacher_row(0, 0, prompt, completion, turn, end).ids


class SDPOTeacher:
    """Runs the teacher forward. A full model keeps its own copy of the weights unless the teacher is the live policy;
    a LoRA policy keeps none: its initial weights are the adapter switched off, an EMA teacher averages the adapter."""

    def __init__(
        self,
        weights: TeacherWeights,
        policy: PreTrainedModel,
        ema_decay: float = 0.99,
        weights_lock: threading.Lock | None = None,
    ):
        if not 0.0 < ema_decay < 1.0:
            raise ValueError(f"the EMA decay must be in (0, 1), got {ema_decay}")
        self.weights = TeacherWeights(weights)
        # The in-process sampler's lock: held while the policy's own adapter computes as the teacher.
        self.weights_lock = weights_lock or threading.Lock()
        self.ema_decay = ema_decay
        self._copy = None
        self._adapter_average: dict[str, torch.Tensor] | None = None
        if self.weights is TeacherWeights.live:
            return
        if not is_adapted(policy):
            self._copy = copy.deepcopy(policy).requires_grad_(False).eval()
        elif self.weights is TeacherWeights.ema:
            self._adapter_average = {name: p.detach().clone() for name, p in adapter_parameters(policy).items()}

    @contextlib.contextmanager
    def teacher(self, policy: PreTrainedModel) -> Iterator[PreTrainedModel]:
        """The model that computes as the teacher, for the duration."""
        if self._copy is not None:
            device = next(policy.parameters()).device
            if next(self._copy.parameters()).device != device:
                self._copy.to(device)
            yield self._copy
        elif self.weights is TeacherWeights.live:
            yield policy
        elif self._adapter_average is not None:
            with self.weights_lock, adapter_weights(policy, self._adapter_average):
                yield policy
        else:
            with (
                self.weights_lock,
                cast(Any, policy).disable_adapter(),
            ):  # a peft model's; PreTrainedModel's stubs lack it
                yield policy

    @torch.no_grad()
    def update(self, policy: PreTrainedModel) -> None:
        """After an optimizer step: move an EMA teacher towards the policy; the others stay as they are."""
        if self.weights is not TeacherWeights.ema:
            return
        if self._adapter_average is not None:
            live = adapter_parameters(policy)
            for name, mine in self._adapter_average.items():
                mine.lerp_(live[name].detach().to(mine.device, mine.dtype), 1.0 - self.ema_decay)
            return
        with self.teacher(policy) as teacher:
            for mine, theirs in zip(teacher.parameters(), policy.parameters(), strict=True):
                mine.lerp_(theirs.detach().to(mine.dtype), 1.0 - self.ema_decay)

    def passes(self, rows: int, continued: bool) -> int:
        """How many backbone forwards `logits` runs for `rows` hinted turns, `continued` from the student's prefix."""
        per_pass = LIVE_ROWS_PER_PASS if continued and self.weights is TeacherWeights.live else ROWS_PER_PASS
        return -(-rows // per_pass)

    @torch.no_grad()
    def logits(
        self,
        policy: PreTrainedModel,
        rows: list[TeacherRow],
        pad_token_id: int,
        temperature: float,
        student_prefix: Prefix | None = None,
    ) -> torch.Tensor:
        """Teacher logits predicting each row's distilled tokens, concatenated: (sum of counts, V).

        `student_prefix` is the student forward's keys and values; a live teacher continues from it.
        """
        counts = [row.count for row in rows]
        if self.weights is not TeacherWeights.live or student_prefix is None:
            with self.teacher(policy) as teacher:
                ids = [row.ids for row in rows]
                return last_token_logits(teacher, ids, counts, pad_token_id, temperature, ROWS_PER_PASS)
        prefix = student_prefix.detached()
        out = []
        for first in range(0, len(rows), LIVE_ROWS_PER_PASS):
            chunk = rows[first : first + LIVE_ROWS_PER_PASS]
            context = prefix.take([row.row for row in chunk], [row.context_columns for row in chunk])
            hidden, _ = continue_prefix(policy, context, [row.continuation for row in chunk], pad_token_id)
            # position t predicts token t+1: the last n tokens are predicted from positions length-n-1 .. length-2
            spans = [(len(row.continuation), row.count) for row in chunk]
            picked = torch.cat([hidden[i, length - n - 1 : length - 1] for i, (length, n) in enumerate(spans)])
            out.append(head_logits(policy, picked, temperature))
        return torch.cat(out)
