"""Channel 2 of the trainer step: SDPO's per-token distillation loss from the hinted teacher.

For each distilled token the student's next-token distribution S is pulled towards the teacher's T
(the same model, shown the env's hint) with a generalized Jensen-Shannon divergence:

  alpha = 0        KL(T || S)                                 (forward, mode covering)
  alpha = 1        KL(S || T)                                 (reverse, mode seeking)
  0 < alpha < 1    alpha * KL(S || M) + (1 - alpha) * KL(T || M),  M = alpha * S + (1 - alpha) * T

Optionally only the student's top-k tokens are compared, with the remaining mass in one tail bucket,
and each token's loss is weighted by the clipped importance ratio pi_theta / pi_rollout of the
sampled token, since the turn was sampled by a possibly older policy.
"""

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SDPOTokenLoss:
    """Per-token losses of the distilled tokens, and the importance ratios that weighted them."""

    per_token: torch.Tensor  # (N,)
    importance_ratio: torch.Tensor  # (N,), detached


def generalized_jsd(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, alpha: float) -> torch.Tensor:
    """The divergence above, per row of two (N, V) log-distributions; zero iff they are equal."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"SDPO's JSD alpha must be in [0, 1], got {alpha}")
    if alpha == 0.0:
        return _kl(teacher_logprobs, student_logprobs)
    if alpha == 1.0:
        return _kl(student_logprobs, teacher_logprobs)
    mixture = torch.logsumexp(
        torch.stack([student_logprobs + math.log(alpha), teacher_logprobs + math.log(1.0 - alpha)]), dim=0
    )
    return alpha * _kl(student_logprobs, mixture) + (1.0 - alpha) * _kl(teacher_logprobs, mixture)


def _kl(p_log: torch.Tensor, q_log: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) per row of finite log-distributions."""
    return (p_log.exp() * (p_log - q_log)).sum(-1)


def top_k_with_tail(
    student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both distributions on the student's top-k tokens plus one bucket for the rest, shape (N, k+1)."""
    index = student_logprobs.detach().topk(k, dim=-1).indices
    return _with_tail(student_logprobs.gather(-1, index)), _with_tail(teacher_logprobs.gather(-1, index))


def _with_tail(top_logprobs: torch.Tensor) -> torch.Tensor:
    kept = torch.logsumexp(top_logprobs, dim=-1, keepdim=True).clamp(max=-1e-7)
    tail = torch.log(-torch.expm1(kept))  # log(1 - sum of the kept probabilities), stable near 1
    return torch.cat([top_logprobs, tail], dim=-1)


def sdpo_token_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    tokens: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    jsd_alpha: float = 0.5,
    top_k: int | None = None,
    importance_clip: float = 2.0,
) -> SDPOTokenLoss:
    """SDPO loss for N distilled tokens from (N, V) student and teacher logits (already temperature-scaled).

    `tokens` are the sampled tokens and `rollout_logprobs` their logprobs under the rollout policy.
    Gradients flow only through `student_logits`.
    """
    student = torch.log_softmax(student_logits.float(), dim=-1)
    teacher = torch.log_softmax(teacher_logits.detach().float(), dim=-1)
    sampled = student.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(sampled.detach() - rollout_logprobs.float()).clamp(max=importance_clip)
    if top_k is not None and top_k < student.size(-1):
        student, teacher = top_k_with_tail(student, teacher, top_k)
    return SDPOTokenLoss(per_token=generalized_jsd(student, teacher, jsd_alpha) * ratio, importance_ratio=ratio)
