"""PreferencePair JSONL, tokenization with the chat template, and the endless pair batches."""

import pytest

from proto.actions import ToolCall
from trainer_client.channels.preference_pairs import (
    ChatMessage,
    PairBatches,
    PreferencePair,
    encode_pair,
    read_pairs,
    write_pairs,
)


def make_pair(step_index: int = 3, chosen_tokens: int = 5, rejected_tokens: int = 6) -> PreferencePair:
    return PreferencePair(
        trace_id="ep-1",
        task_id="task-1",
        step_index=step_index,
        context=[
            ChatMessage(role="system", content="You are a coding agent."),
            ChatMessage(role="user", content="Fix add."),
        ],
        chosen=ToolCall(tool="read_file", args={"path": "mathlib/core.py"}),
        rejected=ToolCall(tool="submit", args={}),
        chosen_text='<tool_call>{"name": "read_file", "arguments": {"path": "mathlib/core.py"}}</tool_call>',
        rejected_text='<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
        reference_chosen_logp=-12.5,
        reference_rejected_logp=-3.25,
        chosen_tokens=chosen_tokens,
        rejected_tokens=rejected_tokens,
        reference_policy="tiny",
        reference_weights="0" * 64,
        reference_dtype="float32",
        teachers=["a", "b"],
        agreement=1.0,
    )


def test_pairs_round_trip_through_jsonl(tmp_path):
    pairs = [make_pair(step_index=i) for i in range(3)]
    path = tmp_path / "pairs.jsonl"
    assert write_pairs(path, pairs) == 3
    assert read_pairs(path) == pairs


def test_a_bad_line_names_its_line_number(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(make_pair().model_dump_json() + "\n" + '{"trace_id": "x"}\n')
    with pytest.raises(ValueError, match=r"pairs.jsonl:2 is not a PreferencePair"):
        read_pairs(path)


def test_batches_cover_every_pair_once_per_pass_and_never_end():
    pairs = [make_pair(step_index=i) for i in range(5)]
    batches = PairBatches(pairs, batch_size=5, seed=1)
    first, second = next(batches), next(batches)
    assert sorted(p.step_index for p in first) == [0, 1, 2, 3, 4]
    assert sorted(p.step_index for p in second) == [0, 1, 2, 3, 4]
    assert batches.passes == 2
    assert all(len(next(batches)) == 5 for _ in range(10))


def test_batches_refuse_an_empty_pair_file():
    with pytest.raises(ValueError, match="at least one pair"):
        PairBatches([], batch_size=2)


def test_encode_pair_ends_both_completions_at_the_end_of_turn_token(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    pair = make_pair()
    prompt_text = tokenizer.apply_chat_template(pair.messages(), add_generation_prompt=True, tokenize=False)
    # the policy stops at <|im_end|>: the newline the template writes after it is never the policy's
    chosen_len = len(tokenizer(pair.chosen_text + "<|im_end|>", add_special_tokens=False)["input_ids"])
    rejected_len = len(tokenizer(pair.rejected_text + "<|im_end|>", add_special_tokens=False)["input_ids"])
    pair = make_pair(chosen_tokens=chosen_len, rejected_tokens=rejected_len)
    encoded = encode_pair(pair, tokenizer)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.decode(encoded.prompt_ids) == prompt_text
    assert tokenizer.decode(encoded.chosen_ids) == pair.chosen_text + "<|im_end|>"
    assert tokenizer.decode(encoded.rejected_ids) == pair.rejected_text + "<|im_end|>"
    assert encoded.chosen_ids[-1] == encoded.rejected_ids[-1] == end_of_turn
    assert encoded.reference_chosen_logp == -12.5


def test_encode_pair_rejects_a_pair_scored_by_another_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="rerun `regrow replay` with the policy you train"):
        encode_pair(make_pair(chosen_tokens=1, rejected_tokens=1), tokenizer)


def test_each_rank_trains_its_share_of_the_step_pairs_and_together_the_whole_batch():
    pairs = [make_pair(step_index=index) for index in range(10)]
    whole = next(PairBatches(pairs, 4, seed=1))
    shares = [next(PairBatches(pairs, 4, seed=1, rank=rank, world=2)) for rank in range(2)]
    assert sorted(p.step_index for p in shares[0] + shares[1]) == sorted(p.step_index for p in whole)
    assert len(shares[0]) == len(shares[1]) == 2
    with pytest.raises(ValueError, match="outside a world of 2"):
        PairBatches(pairs, 4, rank=2, world=2)
