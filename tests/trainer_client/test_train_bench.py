"""`regrow bench train`'s batch: on-policy, so that its SDPO figures are a trainer step's, not an artefact."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from tests.trainer_client.tiny_policy import tiny_qwen2  # noqa: E402
from trainer_client.rollout.rows import EPISODE_SLOT  # noqa: E402

pytestmark = pytest.mark.train


def test_the_bench_batch_is_on_policy_so_sdpo_tokens_keep_their_weight(tmp_path, tokenizer, episode_tokens):
    from regrow.benchmarks.training import _bench_trainer, _timed_step, synthetic_trajectories

    model = tiny_qwen2(tokenizer)
    trajectories = synthetic_trajectories(episode_tokens, rows=2, turns=2, hinted_share=0.5, policy=model)
    trainer = _bench_trainer(model, tokenizer, trajectories, episode_tokens, [], tmp_path, alpha_sdpo=1.0)

    _timed_step(trainer, [{"prompt": EPISODE_SLOT}] * 2)

    # a fixed logprob far from the model's once weighted every distilled token by exp(model - fixed), about 1e-4
    assert trainer._metrics["train"]["sdpo/importance_ratio_mean"][-1] == pytest.approx(1.0, abs=1e-3)
    assert trainer._metrics["train"]["sdpo/distilled_tokens"][-1] > 0
