"""The sigmoid DPO loss of the trainer's third channel."""

import math

import pytest
import torch

from trainer_client.channels.dpo_loss import completion_logps, sigmoid_dpo_loss

pytestmark = pytest.mark.train


def test_loss_at_initialisation_is_ln2_per_pair():
    policy_chosen = torch.tensor([-3.0, -10.0, -0.5])
    policy_rejected = torch.tensor([-4.0, -2.0, -7.5])
    out = sigmoid_dpo_loss(policy_chosen, policy_rejected, policy_chosen.clone(), policy_rejected.clone(), beta=0.1)
    assert out.loss.item() == pytest.approx(math.log(2))
    metrics = out.metrics()
    assert metrics["rewards/margins"] == 0
    assert metrics["rewards/accuracies"] == 0
    assert set(metrics) >= {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"}


def test_loss_falls_when_chosen_action_gains_logprob():
    reference_chosen, reference_rejected = torch.tensor([-5.0, -6.0]), torch.tensor([-4.0, -4.0])
    at_init = sigmoid_dpo_loss(reference_chosen, reference_rejected, reference_chosen, reference_rejected, beta=0.5)
    gained = sigmoid_dpo_loss(
        reference_chosen + 1.0, reference_rejected, reference_chosen, reference_rejected, beta=0.5
    )
    assert gained.loss.item() < at_init.loss.item()
    assert gained.metrics()["rewards/chosen"] == pytest.approx(0.5)
    assert gained.metrics()["rewards/margins"] == pytest.approx(0.5)
    assert gained.metrics()["rewards/accuracies"] == 1.0


def test_loss_rises_when_rejected_action_gains_logprob():
    reference_chosen, reference_rejected = torch.tensor([-5.0]), torch.tensor([-4.0])
    worse = sigmoid_dpo_loss(reference_chosen, reference_rejected + 2.0, reference_chosen, reference_rejected, beta=0.1)
    assert worse.loss.item() > math.log(2)
    assert worse.metrics()["rewards/rejected"] == pytest.approx(0.2)


def test_gradient_raises_chosen_and_lowers_rejected_logprob():
    policy_chosen = torch.tensor([-5.0], requires_grad=True)
    policy_rejected = torch.tensor([-4.0], requires_grad=True)
    out = sigmoid_dpo_loss(policy_chosen, policy_rejected, torch.tensor([-5.0]), torch.tensor([-4.0]), beta=0.1)
    out.loss.backward()
    assert policy_chosen.grad.item() < 0 < policy_rejected.grad.item()
    # at initialisation the gradient is -beta/2 on the chosen side
    assert policy_chosen.grad.item() == pytest.approx(-0.05)


def test_beta_must_be_positive():
    one = torch.tensor([-1.0])
    with pytest.raises(ValueError, match="beta must be > 0"):
        sigmoid_dpo_loss(one, one, one, one, beta=0.0)


def test_completion_logps_of_a_padded_batch_equal_each_row_alone(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    sequences = [([5, 6, 7, 8, 9], [10, 11]), ([12, 13], [14, 15, 16, 17]), ([20], [21])]
    with torch.no_grad():
        batched = completion_logps(model, sequences, pad_token_id=0)
        alone = torch.cat([completion_logps(model, [sequence], pad_token_id=0) for sequence in sequences])
        # by hand for the first row: sum of log softmax at each completion position
        logits = model(input_ids=torch.tensor([[5, 6, 7, 8, 9, 10, 11]])).logits[0].log_softmax(-1)
        by_hand = logits[4, 10] + logits[5, 11]
    assert batched.shape == (3,)
    assert torch.allclose(batched, alone, atol=1e-5)
    assert batched[0].item() == pytest.approx(by_hand.item(), abs=1e-5)
    assert (batched < 0).all()


def test_one_dpo_step_on_a_real_model_lowers_the_loss_from_ln2(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    sequences = [([5, 6, 7], [30, 31, 32]), ([5, 6, 7], [40, 41])]
    with torch.no_grad():
        reference = completion_logps(model, sequences, pad_token_id=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    losses = []
    for _ in range(2):
        policy = completion_logps(model, sequences, pad_token_id=0)
        out = sigmoid_dpo_loss(policy[:1], policy[1:], reference[:1], reference[1:], beta=1.0)
        losses.append(out.loss.item())
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert losses[0] == pytest.approx(math.log(2), abs=1e-5)
    assert losses[1] < losses[0]
