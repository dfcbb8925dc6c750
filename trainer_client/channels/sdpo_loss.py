"""Channel 2 of the trainer step: SDPO's per-token distillation loss from the hinted teacher.

For each distilled token the student's next-token distribution S is pulled towards the teacher's T
(the same model, shown the env's hint) with a generalized Jensen-Shannon divergence:

  alpha = 0        KL(T || S)                                     (forward, mode covering)
  alpha = 1        KL(S || T)                                     (reverse, mode seeking)
  0 < alpha < 1    (1 - alpha) * KL(S || M) + alpha * KL(T || M),  M = (1 - alpha) * S + alpha * T

as in the SDPO reference code. Between the ends it runs from one end's divergence to the other's:
near 0 it is alpha * KL(T || S) + O(alpha^2), near 1 it is (1 - alpha) * KL(S || T) + O((1 - alpha)^2),
so its gradient turns continuously into the end's, while its size shrinks by that leading factor.

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
    mixture = _mixture(student_logprobs, teacher_logprobs, alpha)
    return (1.0 - alpha) * _kl(student_logprobs, mixture) + alpha * _kl(teacher_logprobs, mixture)


def _mixture(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, alpha: float) -> torch.Tensor:
    """log((1 - alpha) * S + alpha * T), stable where both are tiny (torch.logaddexp is several times slower on CPU)."""
    a, b = student_logprobs + math.log(1.0 - alpha), teacher_logprobs + math.log(alpha)
    return torch.maximum(a, b) + torch.log1p(torch.exp(-(a - b).abs()))


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


class _JSDOfLogits(torch.autograd.Function):
    """generalized_jsd of two (N, V) logit tensors' softmaxes, and the student's logprob of `tokens`, row chunk by row
    chunk.

    The gradient is in closed form, so backward recomputes one chunk's distributions instead of
    keeping a dozen (N, V) intermediates: d/dz_student = S * (g - sum(S * g)) with g = d(divergence)/dS,
    which is (1 - alpha) * (log S - log M) for 0 < alpha < 1 and log S - log T at alpha = 1; at alpha = 0 it is S - T.
    """

    @staticmethod
    def forward(ctx, student_logits, teacher_logits, tokens, alpha: float, rows_per_chunk: int):
        divergence = student_logits.new_empty(student_logits.size(0), dtype=torch.float32)
        sampled = torch.empty_like(divergence)
        for rows in _chunks(student_logits.size(0), rows_per_chunk):
            student = torch.log_softmax(student_logits[rows].float(), dim=-1)
            divergence[rows] = generalized_jsd(student, torch.log_softmax(teacher_logits[rows].float(), dim=-1), alpha)
            sampled[rows] = student.gather(-1, tokens[rows].unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(student_logits, teacher_logits)
        ctx.alpha, ctx.rows_per_chunk = alpha, rows_per_chunk
        ctx.mark_non_differentiable(sampled)
        return divergence, sampled

    @staticmethod
    def backward(ctx, grad_divergence, grad_sampled):
        student_logits, teacher_logits = ctx.saved_tensors
        alpha = ctx.alpha
        grad = torch.empty(student_logits.shape, dtype=torch.float32, device=student_logits.device)
        for rows in _chunks(student_logits.size(0), ctx.rows_per_chunk):
            student = torch.log_softmax(student_logits[rows].float(), dim=-1)
            teacher = torch.log_softmax(teacher_logits[rows].float(), dim=-1)
            probs = student.exp()
            if alpha == 0.0:
                chunk = probs - teacher.exp()
            else:
                g = student - teacher if alpha == 1.0 else (1.0 - alpha) * (student - _mixture(student, teacher, alpha))
                chunk = probs * (g - (probs * g).sum(-1, keepdim=True))
            grad[rows] = chunk * grad_divergence[rows].unsqueeze(-1)
        return grad.to(student_logits.dtype), None, None, None, None


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(first, min(first + size, n)) for first in range(0, n, size)]


def sdpo_token_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    tokens: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    jsd_alpha: float = 0.5,
    top_k: int | None = None,
    importance_clip: float = 2.0,
    rows_per_chunk: int = 16,
) -> SDPOTokenLoss:
    """SDPO loss for N distilled tokens from (N, V) student and teacher logits (already temperature-scaled).

    `tokens` are the sampled tokens and `rollout_logprobs` their logprobs under the rollout policy.
    Gradients flow only through `student_logits`.
    """
    if top_k is None or top_k >= student_logits.size(-1):
        divergence, sampled = _JSDOfLogits.apply(
            student_logits, teacher_logits.detach(), tokens, jsd_alpha, rows_per_chunk
        )
        ratio = torch.exp(sampled - rollout_logprobs.float()).clamp(max=importance_clip)
        return SDPOTokenLoss(per_token=divergence * ratio, importance_ratio=ratio)
    student = torch.log_softmax(student_logits.float(), dim=-1)
    teacher = torch.log_softmax(teacher_logits.detach().float(), dim=-1)
    sampled = student.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(sampled.detach() - rollout_logprobs.float()).clamp(max=importance_clip)
    student, teacher = top_k_with_tail(student, teacher, top_k)
    return SDPOTokenLoss(per_token=generalized_jsd(student, teacher, jsd_alpha) * ratio, importance_ratio=ratio)
