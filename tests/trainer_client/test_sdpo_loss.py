"""SDPO's divergence: zero when student and teacher agree, positive when they differ, and bounded weights."""

import pytest
import torch

from trainer_client.channels.sdpo_loss import generalized_jsd, sdpo_token_loss, top_k_with_tail

pytestmark = pytest.mark.train


def logits(seed: int, n: int = 6, vocab: int = 50):
    return torch.randn(n, vocab, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("top_k", [None, 5])
def test_sdpo_loss_is_zero_for_identical_distributions(alpha, top_k):
    same = logits(0)
    tokens = same.argmax(-1)
    rollout = torch.log_softmax(same, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)

    result = sdpo_token_loss(same.clone().requires_grad_(), same, tokens, rollout, jsd_alpha=alpha, top_k=top_k)

    assert torch.allclose(result.per_token, torch.zeros(6), atol=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("top_k", [None, 5])
def test_sdpo_loss_is_positive_when_distributions_differ(alpha, top_k):
    student, teacher = logits(1).requires_grad_(), logits(2)
    tokens = torch.zeros(6, dtype=torch.long)

    result = sdpo_token_loss(student, teacher, tokens, torch.full((6,), -3.0), jsd_alpha=alpha, top_k=top_k)

    assert (result.per_token > 1e-4).all()
    result.per_token.sum().backward()
    assert student.grad.abs().sum() > 0


def test_forward_and_reverse_kl_are_the_endpoints():
    s, t = torch.log_softmax(logits(3), -1), torch.log_softmax(logits(4), -1)

    forward = (t.exp() * (t - s)).sum(-1)
    reverse = (s.exp() * (s - t)).sum(-1)

    assert torch.allclose(generalized_jsd(s, t, 0.0), forward)
    assert torch.allclose(generalized_jsd(s, t, 1.0), reverse)
    assert (generalized_jsd(s, t, 0.5) <= torch.log(torch.tensor(2.0)) + 1e-6).all()  # JSD is bounded by ln 2


def test_top_k_tail_bucket_keeps_a_distribution():
    s, t = torch.log_softmax(logits(5), -1), torch.log_softmax(logits(6), -1)

    top_s, top_t = top_k_with_tail(s, t, 4)

    assert top_s.shape == (6, 5)
    assert torch.allclose(top_s.exp().sum(-1), torch.ones(6), atol=1e-5)
    assert torch.allclose(top_t.exp().sum(-1), torch.ones(6), atol=1e-5)


def test_importance_ratio_is_clipped_and_carries_no_gradient():
    student = logits(7).requires_grad_()
    tokens = torch.arange(6)
    very_unlikely_under_rollout = torch.full((6,), -30.0)

    result = sdpo_token_loss(student, logits(8), tokens, very_unlikely_under_rollout, importance_clip=2.0)

    assert torch.allclose(result.importance_ratio, torch.full((6,), 2.0))
    assert not result.importance_ratio.requires_grad


def test_jsd_alpha_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError, match="alpha must be in"):
        generalized_jsd(torch.zeros(1, 3), torch.zeros(1, 3), 1.5)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 1.0])
def test_chunked_loss_and_its_closed_form_gradient_match_autograd_on_full_logits(alpha):
    student, teacher = (logits(9, n=7) * 3).requires_grad_(), logits(10, n=7) * 3
    tokens = torch.arange(7)
    rollout = torch.full((7,), -2.0)
    upstream = torch.rand(7, generator=torch.Generator().manual_seed(11))

    result = sdpo_token_loss(student, teacher, tokens, rollout, jsd_alpha=alpha, rows_per_chunk=3)
    (result.per_token * upstream).sum().backward()

    reference_student = student.detach().clone().requires_grad_()
    s, t = torch.log_softmax(reference_student, -1), torch.log_softmax(teacher, -1)
    ratio = torch.exp(s.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).detach() - rollout).clamp(max=2.0)
    want = generalized_jsd(s, t, alpha) * ratio
    (want * upstream).sum().backward()

    torch.testing.assert_close(result.per_token, want)
    torch.testing.assert_close(result.importance_ratio, ratio)
    torch.testing.assert_close(student.grad, reference_student.grad)


def test_jsd_matches_the_sdpo_reference_mixture_inside_the_range():
    s, t = torch.log_softmax(logits(12), -1), torch.log_softmax(logits(13), -1)
    alpha = 0.25

    mixture = torch.log((1 - alpha) * s.exp() + alpha * t.exp())
    kl_student = (s.exp() * (s - mixture)).sum(-1)
    kl_teacher = (t.exp() * (t - mixture)).sum(-1)

    torch.testing.assert_close(generalized_jsd(s, t, alpha), torch.lerp(kl_student, kl_teacher, alpha))


@pytest.mark.parametrize(("alpha", "end"), [(1e-4, 0.0), (1 - 1e-4, 1.0)])
def test_jsd_turns_into_the_divergence_of_the_end_it_approaches(alpha, end):
    """Near 0 the divergence is alpha * KL(T || S), near 1 (1 - alpha) * KL(S || T): the ends' own divergences."""
    s, t = torch.log_softmax(logits(14).double(), -1), torch.log_softmax(logits(15).double(), -1)
    weight = alpha if end == 0.0 else 1 - alpha

    torch.testing.assert_close(generalized_jsd(s, t, alpha) / weight, generalized_jsd(s, t, end), rtol=1e-3, atol=0)


@pytest.mark.parametrize("alpha", [0.0, 1e-2, 0.25, 0.7, 1 - 1e-2, 1.0])
def test_closed_form_gradient_matches_autograd_across_the_range(alpha):
    student, teacher = (logits(16, n=5) * 2).double().requires_grad_(), (logits(17, n=5) * 2).double()
    tokens = torch.arange(5)

    result = sdpo_token_loss(student, teacher, tokens, torch.zeros(5), jsd_alpha=alpha, importance_clip=1e9)
    (result.per_token / result.importance_ratio).sum().backward()

    reference = student.detach().clone().requires_grad_()
    generalized_jsd(torch.log_softmax(reference, -1), torch.log_softmax(teacher, -1), alpha).sum().backward()
    torch.testing.assert_close(student.grad, reference.grad, rtol=1e-3, atol=1e-8)  # float32 inside
