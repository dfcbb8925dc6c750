"""The same forwards on every rank of a sharded policy.

Under FSDP2 (`fully_shard`, as `accelerate launch` with deploy/accelerate/fsdp.yaml wraps each decoder layer), each
forward of the backbone gathers every layer's weights from all ranks, and each forward that autograd records
scatters their gradients back in the backward. Both are collectives: if one rank runs a forward that another does
not, the ranks wait on each other for ever. The SDPO teacher and the DPO pairs run as many forwards as their data
asks (hinted turns, pairs, the context the batch already holds), so a rank that runs fewer makes up the difference
with one-token forwards whose output counts zero. The LM head lives in the root's group, whose weights stay gathered
from the training forward to the backward, so calling it is no collective.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from trainer_client.policy.prefix_cache import backbone_of

if TYPE_CHECKING:  # annotations only: importing it loads transformers' modeling code, about a second
    from transformers import PreTrainedModel


@dataclass
class Forwards:
    """How many forwards of the backbone ran (or may run): with autograd recording, and without."""

    grad: int = 0
    no_grad: int = 0


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether FSDP2 shards any of the model's weights over the ranks."""
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(module, FSDPModule) for module in model.modules())


def agreed_most(count: int, device: torch.device) -> int:
    """The largest `count` any rank holds (every rank must call this at the same point of its step)."""
    import torch.distributed as dist

    most = torch.tensor([count], dtype=torch.long, device=device)
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    return int(most.item())


@contextmanager
def counted_forwards(model: PreTrainedModel) -> Iterator[Forwards]:
    """Count the backbone forwards this thread runs in the block, by whether autograd records them."""
    ran = Forwards()
    thread = threading.get_ident()

    def count(module: torch.nn.Module, args: tuple) -> None:
        if threading.get_ident() != thread:
            return
        if torch.is_grad_enabled():
            ran.grad += 1
        else:
            ran.no_grad += 1

    handle = backbone_of(model).register_forward_pre_hook(count)
    try:
        yield ran
    finally:
        handle.remove()


def make_up_forwards(model: PreTrainedModel, ran: Forwards, due: Forwards, pad_token_id: int) -> torch.Tensor | None:
    """Run the one-token forwards that bring `ran` up to `due`: the ones with grad return their output times zero, to
    add to the loss, so that their backward (a collective too) runs as the others' does. None when none had grad."""
    if ran.grad > due.grad or ran.no_grad > due.no_grad:
        raise RuntimeError(
            f"this rank ran {ran} backbone forwards where {due} were agreed: the other ranks are now out of step; "
            "this is a bug in the count a channel agreed"
        )
    backbone = backbone_of(model)
    device = next(backbone.parameters()).device
    one_token = torch.full((1, 1), pad_token_id, dtype=torch.long, device=device)
    with torch.no_grad():
        for _ in range(due.no_grad - ran.no_grad):
            backbone(input_ids=one_token)
    zero = None
    for _ in range(due.grad - ran.grad):
        term = backbone(input_ids=one_token).last_hidden_state.sum() * 0.0
        zero = term if zero is None else zero + term
    return zero
