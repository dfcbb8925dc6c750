"""LoRA through peft: the policy trains a low-rank adapter over frozen weights.

With an adapter, the weights the run started from are the same tensors with the adapter switched off, so SDPO's
initial teacher needs no second copy of the model, and an EMA teacher keeps an average of the adapter alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def with_lora(model: Any, r: int, alpha: int | None, dropout: float, target_modules: str) -> Any:
    """`model` wrapped in a fresh LoRA adapter of rank `r` (B starts at zero, so it computes what `model` did)."""
    from peft import LoraConfig, get_peft_model

    targets: str | list[str] = target_modules if target_modules == "all-linear" else target_modules.split(",")
    config = LoraConfig(
        r=r, lora_alpha=alpha or 2 * r, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM"
    )
    return get_peft_model(model, config)


def is_adapted(model: Any) -> bool:
    """Whether `model` is a peft model (its weights frozen under an adapter)."""
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def causal_lm(model: Any) -> Any:
    """The transformers model under a peft wrapper (the adapter's layers sit inside it), else `model` itself."""
    return model.get_base_model() if is_adapted(model) else model


def adapter_parameters(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's trainable tensors by name."""
    return {name: parameter for name, parameter in model.named_parameters() if parameter.requires_grad}


@contextlib.contextmanager
def adapter_weights(model: Any, weights: dict[str, torch.Tensor]) -> Iterator[Any]:
    """`model` computing with `weights` in its adapter for the duration (an EMA teacher), then its own again."""
    import torch

    live = adapter_parameters(model)
    saved = {name: tensor.detach().clone() for name, tensor in live.items()}
    with torch.no_grad():
        for name, tensor in live.items():
            tensor.copy_(weights[name])
    try:
        yield model
    finally:
        with torch.no_grad():
            for name, tensor in live.items():
                tensor.copy_(saved[name])
