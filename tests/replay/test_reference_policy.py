"""The DPO reference is the policy training starts from, loaded as training loads it; other pairs are refused."""

import pytest
import torch

from proto.transcript import format_tool_call, transcript
from tests.replay.recorded_traces import recorded_traces
from tests.replay.test_preference_pairs import make_pair
from trainer_client.channels.dpo_loss import completion_logps
from trainer_client.channels.preference_pairs import completion_ids, write_pairs
from trainer_client.channels.reference_policy import weights_dtype, weights_sha256
from trainer_client.policy.policy_loading import load_policy
from trainer_client.replay.policy_scorer import PolicyScorer

pytestmark = pytest.mark.train


@pytest.fixture(scope="module")
def bf16_policy_dir(tiny_model_dir, tmp_path_factory):
    """The tiny policy saved in bfloat16, as most released checkpoints are."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("bf16-policy")
    AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).to(torch.bfloat16).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    return folder


def test_the_scorer_stores_the_logprobs_of_the_policy_as_training_loads_it(bf16_policy_dir):
    trace = recorded_traces()[0]
    messages = transcript(trace, before_step=1)
    text = format_tool_call(trace.steps[1].action)
    scorer = PolicyScorer(bf16_policy_dir)
    trained, tokenizer = load_policy(str(bf16_policy_dir))
    prompt, completion = completion_ids(tokenizer, messages, text)
    with torch.no_grad():
        (expected,) = completion_logps(trained, [(prompt, completion)], tokenizer.pad_token_id).tolist()
    assert scorer.dtype == weights_dtype(trained) == "float32"
    assert scorer.weights == weights_sha256(trained)
    assert scorer.score(messages, text).logp == pytest.approx(expected, abs=1e-5)


def _train_with(pairs, model_dir, tmp_path, **overrides):
    from trainer_client.train.run import run_training
    from trainer_client.train.settings import TrainSettings

    path = tmp_path / "pairs.jsonl"
    write_pairs(path, pairs)
    settings = TrainSettings(
        env="http://127.0.0.1:9",  # never reached: the pairs are checked before any episode
        model=str(model_dir),
        output_dir=tmp_path / "run",
        task_ids=["t"],
        steps=1,
        group_size=2,
        groups_per_step=1,
        workers=1,
        pairs=path,
        beta_dpo=1.0,
        device="cpu",
        logger="none",
        episode_timeout_s=20,
        **overrides,
    )
    return run_training(settings)


def test_training_refuses_pairs_scored_by_another_model(tiny_model_dir, tmp_path):
    scored_elsewhere = make_pair().model_copy(update={"reference_weights": "f" * 64, "reference_policy": "other"})
    with pytest.raises(ValueError, match=r"not by --model .*rerun `regrow replay --policy"):
        _train_with([scored_elsewhere], tiny_model_dir, tmp_path)


def test_training_refuses_pairs_scored_in_another_dtype(tiny_model_dir, tmp_path):
    model, _ = load_policy(str(tiny_model_dir))
    in_bf16 = make_pair().model_copy(update={"reference_weights": weights_sha256(model), "reference_dtype": "bfloat16"})
    # asked for float32 (with auto the weights would load in the pairs' bf16, and the hash would differ instead)
    with pytest.raises(ValueError, match=r"in bfloat16, but --model .* trains in float32"):
        _train_with([in_bf16], tiny_model_dir, tmp_path, weights_dtype="float32")
