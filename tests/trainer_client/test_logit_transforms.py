"""The extra channels' logits are the model's own: the families that transform logits after the LM head (Gemma's soft
cap, Cohere's scale, Granite's divisor) get the same transform in `head_logits` as in their forward."""

import pytest
import torch
import transformers

pytestmark = pytest.mark.train

from trainer_client.policy.policy_forward import head_logits  # noqa: E402
from trainer_client.policy.prefix_cache import backbone_of  # noqa: E402

SHAPE = dict(
    vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
)  # fmt: skip


@pytest.mark.parametrize(
    ("config_class", "transform"),
    [
        ("Gemma2Config", {"final_logit_softcapping": 0.5}),
        ("CohereConfig", {"logit_scale": 3.0}),
        ("GraniteConfig", {"logits_scaling": 4.0}),
    ],
)
def test_head_logits_match_the_models_own_forward(config_class, transform):
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**SHAPE, **transform)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.tensor([[3, 14, 15, 9, 26, 5]])
    with torch.no_grad():
        own = model(input_ids=ids).logits[0].float()
        hidden = backbone_of(model)(input_ids=ids).last_hidden_state[0]
        ours = head_logits(model, hidden, temperature=2.0)
    torch.testing.assert_close(ours, own / 2.0, rtol=1e-5, atol=1e-5)
    plain = model.get_output_embeddings()(hidden).float() / 2.0
    assert not torch.allclose(plain, ours, atol=1e-3)  # the transform mattered at these weights
