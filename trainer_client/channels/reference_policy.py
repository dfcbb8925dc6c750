"""Which model the DPO pairs' reference logprobs came from: the hash and dtype of its weights, checked before training.

DPO's reference must be the policy at the start of training, loaded as training loads it: logprobs stored by
another model, or by the same one in another dtype, shift every implicit reward with no sign in the loss.
"""

import hashlib
from collections.abc import Sequence
from typing import Any

from trainer_client.channels.preference_pairs import PreferencePair


def weights_dtype(model: Any) -> str:
    """The dtype of the model's weights as a plain name: float32, bfloat16, ..."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def weights_sha256(model: Any) -> str:
    """sha256 over every parameter's name, shape, dtype and bytes, in the model's own order."""
    import torch

    digest = hashlib.sha256()
    for name, parameter in model.named_parameters():
        tensor = parameter.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_reference_policy(pairs: Sequence[PreferencePair], model: Any, model_name: str, source: str) -> None:
    """Raise ValueError, saying what to rerun, unless every pair was scored by `model` as loaded for training."""
    dtype = weights_dtype(model)
    other_dtype = [pair for pair in pairs if pair.reference_dtype != dtype]
    if other_dtype:
        raise ValueError(
            f"{len(other_dtype)} of {len(pairs)} pairs in {source} were scored with the policy's weights in "
            f"{other_dtype[0].reference_dtype}, but --model {model_name} trains in {dtype}: their reference "
            f"logprobs are not the trained policy's; rerun `regrow replay --policy {model_name}` "
            "(it loads the policy as training does)"
        )
    digest = weights_sha256(model)
    other_weights = [pair for pair in pairs if pair.reference_weights != digest]
    if other_weights:
        raise ValueError(
            f"{len(other_weights)} of {len(pairs)} pairs in {source} were scored by "
            f"{other_weights[0].reference_policy!r} "
            f"(weights sha256 {other_weights[0].reference_weights[:12]}), not by --model {model_name} "
            f"(sha256 {digest[:12]}): DPO would measure the policy against another model; rerun "
            f"`regrow replay --policy {model_name}` with the model you train, before training it"
        )
