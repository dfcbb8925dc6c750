"""A step whose gradient is zero everywhere leaves the weights where they are.

A GRPO step whose groups all scored alike (and that carries no SDPO turn or DPO pair) has an exactly zero gradient.
Adam would still move every weight by its momentum: after one step with a gradient, the next two empty steps move
the weights 0.67 and 0.52 of a learning rate further the same way (measured on the cpu-overfit recipe), so a lone
noisy group is applied about three times. Handing the optimizer no gradient (None) makes it skip every parameter,
its moments and step count included; the learning-rate schedule still advances. Under DeepSpeed, whose engine holds
the gradients and takes the step itself, the trainer does not add this callback.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from transformers import TrainerCallback

if TYPE_CHECKING:
    from accelerate import Accelerator

logger = logging.getLogger(__name__)


def has_gradient(model: torch.nn.Module, accelerator: Accelerator | None = None) -> bool:
    """Whether any rank holds a non-zero gradient of `model` (every rank gets the same answer)."""
    local = False
    for parameter in model.parameters():
        grad = parameter.grad
        if grad is None:
            continue
        grad = grad.to_local() if hasattr(grad, "to_local") else grad  # FSDP2 keeps a shard of it on each rank
        if bool(grad.any()):
            local = True
            break
    if accelerator is None or accelerator.num_processes == 1:
        return local
    # the shards differ under FSDP, so the ranks agree on one answer or their optimizers would drift apart
    flag = torch.tensor([1.0 if local else 0.0], device=accelerator.device)
    return bool(accelerator.reduce(flag, "sum").item() > 0)


class SilentStepsSkipped(TrainerCallback):
    """Before each optimizer step, drop the gradients of a step that has none, so that the optimizer skips it."""

    def __init__(self, accelerator: Accelerator | None = None, metrics: dict[str, list[float]] | None = None) -> None:
        self.accelerator = accelerator
        self.metrics = metrics if metrics is not None else {}  # `optimizer/step_skipped`: 1.0 for a skipped step
        self.skipped = 0

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        silent = model is not None and not has_gradient(model, self.accelerator)
        self.metrics.setdefault("optimizer/step_skipped", []).append(float(silent))
        if not silent:
            return
        for parameter in model.parameters():
            parameter.grad = None
        self.skipped += 1
        logger.info("step %d has no gradient (every group scored alike): the weights stay", state.global_step + 1)
