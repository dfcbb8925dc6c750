"""Gradient checkpointing that leaves the in-process sampler its KV cache.

transformers checkpoints a decoder layer when its `gradient_checkpointing` flag is set and the model is in training
mode, and then drops the layer's cache (the backbone, too, then drops `use_cache`). The HF sampler generates from
the live model in a thread of its own while the trainer steps, so the model is in training mode throughout and the
sampler loses its cache. Here the flag reads true only where autograd records: torch's grad mode is per thread, so
the step's forward is checkpointed and the sampler's (under `torch.no_grad`) keeps its cache. A forward without grad
stores no activations: checkpointing it saves nothing.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

_STORED = "_regrow_gradient_checkpointing"


class _CheckpointingWhileRecording:
    """A layer's `gradient_checkpointing` flag: as transformers set it, and only while autograd records."""

    def __get__(self, layer: Any, owner: type) -> Any:
        if layer is None:  # read from the class: the descriptor itself
            return self
        return bool(layer.__dict__.get(_STORED, False)) and torch.is_grad_enabled()

    def __set__(self, layer: Any, value: bool) -> None:
        layer.__dict__[_STORED] = bool(value)


def checkpoint_only_while_recording(model: torch.nn.Module) -> int:
    """Make every module class of `model` that carries the flag (the decoder layers, and the backbone, which drops
    `use_cache` on its own) read it through grad mode; the flags as already set are kept. Returns how many classes
    changed."""
    classes = {type(module) for module in model.modules() if hasattr(module, "gradient_checkpointing")}
    changed = 0
    for klass in classes:
        if isinstance(inspect.getattr_static(klass, "gradient_checkpointing", None), _CheckpointingWhileRecording):
            continue
        for module in (module for module in model.modules() if type(module) is klass):
            module.__dict__[_STORED] = bool(module.__dict__.pop("gradient_checkpointing", False))
        klass.gradient_checkpointing = _CheckpointingWhileRecording()  # type: ignore[attr-defined]
        changed += 1
    return changed
