"""The current policy's view of an action: its logprob (the DPO reference) and its token entropy (the gate)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_client.channels.preference_pairs import completion_ids
from trainer_client.channels.reference_policy import weights_dtype, weights_sha256


@dataclass(frozen=True)
class ActionScore:
    """Summed logprob and mean per-token entropy (nats) of one assistant turn under the policy."""

    logp: float
    tokens: int
    mean_entropy: float


class PolicyScorer:
    """Scores assistant turns with a local HF policy, the same tokenization the DPO channel uses."""

    def __init__(self, path: Path, device: str = "cpu") -> None:
        import torch

        from trainer_client.policy.policy_loading import load_policy

        if not Path(path).is_dir():
            raise ValueError(f"policy folder {path} does not exist; pass the model you are about to train")
        self.name = str(path)
        # loaded as `regrow train` loads it (same dtype), so that the stored logprobs are the trained policy's
        self._model, self.tokenizer = load_policy(str(path), device)
        self._model.eval()
        if self.tokenizer.chat_template is None:
            raise ValueError(f"policy {path} has no chat template; the replay renders chats with it")
        self.weights = weights_sha256(self._model)
        self.dtype = weights_dtype(self._model)
        self._torch = torch
        self._device = device

    def score(self, messages: list[dict[str, Any]], assistant_text: str) -> ActionScore:
        """Teacher-force `assistant_text` after `messages` and read the policy's logprob and entropy."""
        torch = self._torch
        prompt, completion = completion_ids(self.tokenizer, messages, assistant_text)
        input_ids = torch.tensor([prompt + completion], device=self._device)
        with torch.no_grad():
            logits = self._model(input_ids=input_ids).logits[0, len(prompt) - 1 : -1].float()
        logps = logits.log_softmax(-1)
        targets = input_ids[0, len(prompt) :]
        token_logps = logps.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        entropy = -(logps.exp() * logps).sum(-1)
        return ActionScore(logp=token_logps.sum().item(), tokens=len(completion), mean_entropy=entropy.mean().item())
