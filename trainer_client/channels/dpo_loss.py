"""Channel 3 of the trainer step: the sigmoid DPO loss on replay pairs with stored reference logprobs."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class DPOLoss:
    """The mean sigmoid DPO loss over a batch of pairs, with the implicit rewards TRL logs."""

    loss: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor
    policy_chosen_logps: torch.Tensor
    policy_rejected_logps: torch.Tensor

    def metrics(self) -> dict[str, float]:
        """Scalars under TRL's DPO names (rewards/chosen, rewards/margins, ...)."""
        margins = self.chosen_rewards - self.rejected_rewards
        return {
            "loss": self.loss.item(),
            "rewards/chosen": self.chosen_rewards.mean().item(),
            "rewards/rejected": self.rejected_rewards.mean().item(),
            "rewards/margins": margins.mean().item(),
            "rewards/accuracies": (margins > 0).float().mean().item(),
            "logps/chosen": self.policy_chosen_logps.detach().mean().item(),
            "logps/rejected": self.policy_rejected_logps.detach().mean().item(),
        }


def sigmoid_dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    reference_chosen_logps: torch.Tensor,
    reference_rejected_logps: torch.Tensor,
    beta: float,
) -> DPOLoss:
    """-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), averaged over pairs.

    Each argument holds one summed completion logprob per pair, shape [B]. The reference
    values are stored with the pairs, so no reference model runs during training.
    """
    if beta <= 0:
        raise ValueError(f"DPO beta must be > 0, got {beta}; turn the channel off with its weight instead")
    if policy_chosen_logps.numel() == 0:
        raise ValueError("sigmoid_dpo_loss got an empty batch of pairs")
    reference_chosen_logps = reference_chosen_logps.to(policy_chosen_logps)
    reference_rejected_logps = reference_rejected_logps.to(policy_rejected_logps)
    chosen_logratios = policy_chosen_logps - reference_chosen_logps
    rejected_logratios = policy_rejected_logps - reference_rejected_logps
    losses = -F.logsigmoid(beta * (chosen_logratios - rejected_logratios))
    return DPOLoss(
        loss=losses.mean(),
        chosen_rewards=beta * chosen_logratios.detach(),
        rejected_rewards=beta * rejected_logratios.detach(),
        policy_chosen_logps=policy_chosen_logps,
        policy_rejected_logps=policy_rejected_logps,
    )


def completion_logps(
    model: torch.nn.Module, sequences: list[tuple[list[int], list[int]]], pad_token_id: int
) -> torch.Tensor:
    """Summed logprob of each completion given its prompt under `model`, shape [len(sequences)].

    `sequences` holds (prompt_ids, completion_ids) pairs; rows are right-padded into one
    forward pass. Gradients flow when the caller has them enabled.
    """
    if not sequences:
        raise ValueError("completion_logps got no sequences")
    if any(not prompt or not completion for prompt, completion in sequences):
        raise ValueError("every prompt and every completion needs at least one token")
    device = next(model.parameters()).device
    rows = [prompt + completion for prompt, completion in sequences]
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long, device=device)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long, device=device)
        attention_mask[i, : len(row)] = 1
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    totals = []
    for i, (prompt, completion) in enumerate(sequences):
        # logits at position t predict token t+1, so the completion is scored from len(prompt)-1
        start = len(prompt) - 1
        row_logits = logits[i, start : start + len(completion)].float()
        targets = input_ids[i, len(prompt) : len(prompt) + len(completion)]
        token_logps = row_logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - row_logits.logsumexp(-1)
        totals.append(token_logps.sum())
    return torch.stack(totals)
