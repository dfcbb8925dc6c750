"""`regrow sft`'s data: which episodes are kept, and which of their tokens are trained on (no engine, no training)."""

import json

import pytest

from trainer_client.rollout.chat_tokens import EpisodeTokenizer
from trainer_client.train.sft import SftSettings, read_exported, sft_examples

pytestmark = pytest.mark.train

CALL = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
MESSAGES = [
    {"role": "system", "content": "You are a software engineer."},
    {"role": "user", "content": "Fix clamp."},
    {"role": "assistant", "content": CALL},
    {"role": "user", "content": "<tool_response>\nsubmitted\n</tool_response>"},
    {"role": "assistant", "content": "done"},
]


def test_only_the_assistants_messages_are_masked_in_and_the_ids_are_the_templates_own(tokenizer):
    tokens = EpisodeTokenizer(tokenizer)
    ids, mask = tokens.assistant_masked(MESSAGES)
    assert ids == tokenizer.apply_chat_template(MESSAGES, tokenize=True, return_dict=False)
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained.replace("<|im_end|>", "").split() == [*CALL.split(), "done"]


def test_episodes_below_the_reward_or_too_long_are_counted_not_cut(tokenizer, tmp_path):
    rows = [{"messages": MESSAGES, "reward": reward} for reward in (1.0, 0.5, None, 1.0)]
    rows.append({"messages": [*MESSAGES, {"role": "assistant", "content": "x " * 400}], "reward": 1.0})
    exported = tmp_path / "demos.jsonl"
    exported.write_text("".join(json.dumps(row) + "\n" for row in rows))
    settings = SftSettings(traces=exported, max_length=300)
    examples, below, too_long = sft_examples(read_exported(exported), EpisodeTokenizer(tokenizer), settings)
    assert (len(examples), below, too_long) == (2, 2, 1)
    assert all(len(e["input_ids"]) == len(e["assistant_masks"]) <= 300 for e in examples)


def test_a_file_that_is_no_export_is_refused_with_the_command_that_makes_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="regrow traces export"):
        read_exported(tmp_path / "missing.jsonl")
    (tmp_path / "other.jsonl").write_text('{"text": "hello"}\n')
    with pytest.raises(ValueError, match="no `messages`"):
        read_exported(tmp_path / "other.jsonl")
