"""Each channel's share of the step's gradient, read by hooks during the step's one backward.

A channel's share is the gradient of its weighted term of the step loss with respect to the last
hidden states it reads (the backbone's output): everything the channel sends below the LM head.
The LM head's own weight gradient is left out. No extra backward runs: RLVR's share is the
gradient at the batch forward's states minus what SDPO sent into the rows it reads from them,
SDPO's is the gradient at those rows, DPO's the gradient at the states its pairs project.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only: importing it loads transformers' modeling code, about a second
    from transformers import PreTrainedModel


class ChannelGradients:
    """Accumulates each channel's squared gradient norm over a step's backward; `norms` reads and resets them."""

    def __init__(self) -> None:
        self._squares: dict[str, float] = {}
        self._sdpo_index: torch.Tensor | None = None
        self._sdpo_grad: torch.Tensor | None = None

    def watch_batch(self, hidden: torch.Tensor) -> None:
        """Watch the batch forward's last hidden states (B, W, H), which RLVR and SDPO read."""
        if hidden.requires_grad:
            hidden.register_hook(self._batch_grad)

    def sdpo_rows(self, hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """SDPO's student states: rows `index` of the flattened batch states (B * W, H), watched."""
        rows = hidden.flatten(0, 1).index_select(0, index)
        if rows.requires_grad:
            self._sdpo_index = index
            rows.register_hook(self._sdpo_rows_grad)
        return rows

    @contextmanager
    def head_inputs(self, model: PreTrainedModel, channel: str) -> Iterator[None]:
        """Within the block, watch every state `model`'s LM head projects with gradient, as `channel`'s."""

        def watch(module: torch.nn.Module, args: tuple) -> None:
            if args and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
                args[0].register_hook(lambda grad: self._add(channel, grad))

        handle = model.get_output_embeddings().register_forward_pre_hook(watch)
        try:
            yield
        finally:
            handle.remove()

    def norms(self) -> dict[str, float]:
        """Each channel's gradient norm since the last call."""
        out = {channel: math.sqrt(square) for channel, square in self._squares.items()}
        self._squares, self._sdpo_index, self._sdpo_grad = {}, None, None
        return out

    def _add(self, channel: str, grad: torch.Tensor) -> None:
        self._squares[channel] = self._squares.get(channel, 0.0) + float(grad.detach().float().pow(2).sum())

    def _sdpo_rows_grad(self, grad: torch.Tensor) -> None:
        self._sdpo_grad = grad
        self._add("sdpo", grad)

    def _batch_grad(self, grad: torch.Tensor) -> None:
        # autograd reaches SDPO's rows before the states they were read from, so SDPO's share is known here
        if self._sdpo_grad is not None and self._sdpo_index is not None:
            flat = grad.detach().flatten(0, 1)
            grad = flat.index_add(0, self._sdpo_index, -self._sdpo_grad.to(flat.dtype))
            self._sdpo_grad = None
        self._add("rlvr", grad)


# How far one step's measurement moves an automatic weight, in log space: single steps' norms are noisy.
AUTO_MOMENTUM = 0.5
# An automatic weight stays within this factor of the ratio it was asked for.
AUTO_RANGE = 1e4


def next_weight(weight: float, target: float, rlvr_norm: float, channel_norm: float) -> float:
    """The multiplier of a channel after a step in which, weighted by `weight`, its gradient norm was `channel_norm`
    and RLVR's `rlvr_norm`: moved (geometrically, by AUTO_MOMENTUM) to where the channel's norm would be `target`
    times RLVR's. A step without either gradient leaves it as it was."""
    if weight <= 0 or target <= 0 or rlvr_norm <= 0 or channel_norm <= 0:
        return weight
    wanted = target * rlvr_norm / (channel_norm / weight)
    moved = math.exp((1 - AUTO_MOMENTUM) * math.log(weight) + AUTO_MOMENTUM * math.log(wanted))
    return min(max(moved, target / AUTO_RANGE), target * AUTO_RANGE)
