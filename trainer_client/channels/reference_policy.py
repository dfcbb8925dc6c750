"""Which model the DPO pairs' reference logprobs came from: the hash and dtype of its weights, checked before training.

DPO's reference must be the policy at the start of training, loaded as training loads it: logprobs stored by
another model, or by the same one in another dtype, shift every implicit reward with no sign in the loss. The same
holds for the precision of the forward: pairs scored in float32 and trained under bf16 autocast start with implicit
rewards of bf16 rounding, so training scores them again at its own precision first.
"""

import hashlib
from collections.abc import Sequence
from typing import Any

from trainer_client.channels.preference_pairs import BF16_AUTOCAST, PreferencePair, encode_pair


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


def training_precision(device: str, bf16: bool) -> str:
    """The precision `regrow train` computes in: bf16 autocast on a GPU when asked, float32 otherwise."""
    from trainer_client.channels.preference_pairs import FULL_PRECISION

    return BF16_AUTOCAST if device == "cuda" and bf16 else FULL_PRECISION


def rescored_at(pairs: Sequence[PreferencePair], model: Any, tokenizer: Any, precision: str) -> list[PreferencePair]:
    """`pairs` with the reference logprobs of those scored at another precision computed again by `model` (the start
    weights, already checked to be the reference) at `precision`; the others as they are."""
    import torch

    from trainer_client.channels.dpo_loss import completion_logps

    device = next(model.parameters()).device
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == BF16_AUTOCAST)
    out = []
    for pair in pairs:
        if pair.reference_precision == precision:
            out.append(pair)
            continue
        encoded = encode_pair(pair, tokenizer)
        sequences = [(encoded.prompt_ids, encoded.chosen_ids), (encoded.prompt_ids, encoded.rejected_ids)]
        with torch.no_grad(), autocast:
            chosen, rejected = completion_logps(model, sequences, tokenizer.pad_token_id).tolist()
        update = {"reference_chosen_logp": chosen, "reference_rejected_logp": rejected}
        out.append(pair.model_copy(update={**update, "reference_precision": precision}))
    return out
