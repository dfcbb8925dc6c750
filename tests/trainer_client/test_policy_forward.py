"""The extra channels' forwards: continuing the batch's recorded keys and values equals running everything anew."""

import dataclasses

import pytest
import torch

from tests.trainer_client.tiny_policy import tiny_qwen2
from trainer_client.channels.dpo_loss import completion_logps
from trainer_client.channels.hinted_self import SDPOTeacher, TeacherWeights, teacher_row
from trainer_client.policy.policy_forward import head_logits, left_padded, pair_logps
from trainer_client.policy.prefix_cache import recorded_forward
from trainer_client.rollout.rows import HintedTurn

pytestmark = pytest.mark.train

SYSTEM = "<|im_start|>system\nYou are a software engineer working in a repository at /workspace.<|im_end|>\n"


@pytest.fixture()
def model(tokenizer):
    return tiny_qwen2(tokenizer)


@pytest.fixture()
def pairs(tokenizer):
    """Two pairs whose prompts share the system prompt, with completions of different lengths."""
    encode = tokenizer.encode
    prompts = [
        encode(SYSTEM + "<|im_start|>user\nfix clamp<|im_end|>\n<|im_start|>assistant\n"),
        encode(SYSTEM + "<|im_start|>user\nrun the tests and read calc/ops.py<|im_end|>\n<|im_start|>assistant\n"),
    ]
    chosen = [encode('<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'), encode("ran it")]
    rejected = [encode("list_dir"), encode("def clamp(value, low, high):")]
    return list(zip(prompts, chosen, rejected))


@pytest.fixture()
def batch(tokenizer):
    """A left-padded batch like GRPOTrainer's: a padded row starts like the pairs' prompts, a longer one shares
    nothing."""
    rows = [
        tokenizer.encode(SYSTEM + "<|im_start|>user\nfix clamp<|im_end|>\n<|im_start|>assistant\nFAILED"),
        tokenizer.encode("def clamp(value, low, high):\n    return max(low, min(value, high))\n" * 4),
    ]
    return left_padded(rows, tokenizer.pad_token_id, torch.device("cpu"))


def logps_and_grads(model, compute):
    model.zero_grad()
    values = compute()
    values.sum().backward()
    return values.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def full_forward_logps(model, pairs, pad_token_id):
    return completion_logps(model, [(p, c) for p, c, _ in pairs] + [(p, r) for p, _, r in pairs], pad_token_id)


def assert_same(got, want):
    (got_values, got_grads), (want_values, want_grads) = got, want
    torch.testing.assert_close(got_values, want_values, rtol=1e-4, atol=1e-4)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def test_recording_a_forward_keeps_its_output_and_its_keys_and_values(model, batch):
    input_ids, attention_mask = batch
    with torch.no_grad():
        plain = model(input_ids=input_ids, attention_mask=attention_mask).logits
        with recorded_forward(model, keep_prefix=True) as recorded:
            kept = model(input_ids=input_ids, attention_mask=attention_mask).logits

    assert torch.equal(plain, kept)
    assert len(recorded.hidden) == 1 and recorded.prefix is not None
    assert recorded.prefix.width == input_ids.size(1) and len(recorded.prefix.layers) == model.config.num_hidden_layers
    assert torch.equal(recorded.prefix.ids, input_ids)


def test_pair_logps_equal_full_forwards_in_value_and_gradient(model, pairs, tokenizer):
    want = logps_and_grads(model, lambda: full_forward_logps(model, pairs, tokenizer.pad_token_id))
    got = logps_and_grads(model, lambda: torch.cat(pair_logps(model, pairs, tokenizer.pad_token_id)))
    assert_same(got, want)


def test_pair_logps_continuing_a_recorded_batch_equal_full_forwards_in_value_and_gradient(
    model, pairs, batch, tokenizer
):
    input_ids, attention_mask = batch

    def continued():
        with recorded_forward(model, keep_prefix=True) as recorded:
            batch_logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        chosen, rejected = pair_logps(model, pairs, tokenizer.pad_token_id, prefix=recorded.prefix)
        # the batch's own loss is not part of the comparison, only its graph is shared
        return torch.cat([chosen, rejected]) + 0.0 * batch_logits.sum()

    want = logps_and_grads(model, lambda: full_forward_logps(model, pairs, tokenizer.pad_token_id))
    assert_same(logps_and_grads(model, continued), want)


def test_pair_logps_without_context_grad_equal_completions_scored_after_a_no_grad_prompt(
    model, pairs, batch, tokenizer
):
    input_ids, attention_mask = batch

    def straightforward():
        totals = []
        for prompt, *completions in pairs:
            with torch.no_grad():
                cache = model(input_ids=torch.tensor([prompt[:-1]]), use_cache=True).past_key_values
            for completion in completions:
                ids = torch.tensor([[prompt[-1], *completion]])
                logits = model(input_ids=ids, past_key_values=cache.__class__(ddp_cache_data=list(cache))).logits[
                    0, :-1
                ]
                totals.append(torch.log_softmax(logits, -1).gather(-1, ids[0, 1:].unsqueeze(-1)).sum())
        return torch.stack(totals[0::2] + totals[1::2])

    def without_context_grad():
        with recorded_forward(model, keep_prefix=True) as recorded:
            batch_logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        chosen, rejected = pair_logps(model, pairs, tokenizer.pad_token_id, prefix=recorded.prefix, context_grad=False)
        return torch.cat([chosen, rejected]) + 0.0 * batch_logits.sum()

    got = logps_and_grads(model, without_context_grad)
    assert_same(got, logps_and_grads(model, straightforward))
    # same values as the exact mode, but no gradient reaches tokens that only the contexts contain
    torch.testing.assert_close(
        got[0], full_forward_logps(model, pairs, tokenizer.pad_token_id).detach(), rtol=1e-4, atol=1e-4
    )
    context_only = {t for p, _, _ in pairs for t in p[:-1]} - {t for p, c, r in pairs for t in (p[-1], *c, *r)}
    assert context_only
    assert got[1]["model.embed_tokens.weight"][sorted(context_only)].abs().sum() == 0


@pytest.fixture()
def hinted_batch(model, tokenizer):
    """A left-padded student batch of two rows with one hinted turn each, its recorded forward and teacher rows."""
    encode = tokenizer.encode
    prompts = [
        encode(SYSTEM + "<|im_start|>user\nfix clamp<|im_end|>\n<|im_start|>assistant\n"),
        encode("<|im_start|>user\nls<|im_end|>\n"),
    ]
    turn_one, response, turn_two = (
        encode("list_dir"),
        encode("<|im_start|>user\nran it<|im_end|>\n<|im_start|>assistant\n"),
        encode("submit now"),
    )
    completions = [turn_one + response + turn_two, turn_one + response + turn_two + response + turn_one]
    hint = tuple(encode("<|im_start|>user\nFeedback on your last action: unknown tool<|im_end|>\n"))
    # the hint goes after the tool response's message, before the generation prompt
    hint_at = len(turn_one) + len(encode("<|im_start|>user\nran it<|im_end|>\n"))
    start = len(turn_one) + len(response)
    turns = [
        (0, HintedTurn(hint_at, start, start + len(turn_two), hint)),
        (1, HintedTurn(hint_at, start, start + len(turn_two), hint)),
    ]
    prompt_ids, prompt_mask = left_padded(prompts, tokenizer.pad_token_id, torch.device("cpu"))
    completion_ids, completion_mask = (
        t.flip(1) for t in left_padded([c[::-1] for c in completions], tokenizer.pad_token_id, torch.device("cpu"))
    )
    rows = [teacher_row(row, prompt_ids.size(1), prompts[row], completions[row], turn, turn.end) for row, turn in turns]
    with torch.no_grad(), recorded_forward(model, keep_prefix=True) as recorded:
        model(
            input_ids=torch.cat([prompt_ids, completion_ids], 1),
            attention_mask=torch.cat([prompt_mask, completion_mask], 1),
        )
    return rows, turns, prompt_ids.size(1), recorded


def test_live_teacher_continuing_the_student_forward_equals_a_full_teacher_forward(model, tokenizer, hinted_batch):
    rows, turns, _, recorded = hinted_batch
    teacher = SDPOTeacher(TeacherWeights.live, model)

    continued = teacher.logits(model, rows, tokenizer.pad_token_id, 0.7, student_prefix=recorded.prefix)
    full = teacher.logits(model, rows, tokenizer.pad_token_id, 0.7)

    turn = turns[0][1]
    assert continued.shape == (2 * (turn.end - turn.start), model.config.vocab_size)
    torch.testing.assert_close(continued, full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weights", [TeacherWeights.live, TeacherWeights.initial])
def test_the_teacher_reads_the_hint_its_logits_differ_from_the_students(model, tokenizer, hinted_batch, weights):
    rows, turns, prompt_width, recorded = hinted_batch
    teacher = SDPOTeacher(weights, model)
    # the student's own logits at the distilled tokens, from the batch forward (no hint)
    student = torch.cat(
        [recorded.hidden[-1][row, prompt_width + turn.start - 1 : prompt_width + turn.end - 1] for row, turn in turns]
    )
    student = head_logits(model, student, 1.0)
    # the same rows without the hint: the generation prompt and the turn, what follows the hint's place
    unhinted = [
        dataclasses.replace(row, continuation=row.continuation[-(turn.end - turn.hint_at) :])
        for row, (_, turn) in zip(rows, turns)
    ]

    with torch.no_grad():
        hinted_logits = teacher.logits(model, rows, tokenizer.pad_token_id, 1.0, student_prefix=recorded.prefix)
        unhinted_logits = teacher.logits(model, unhinted, tokenizer.pad_token_id, 1.0, student_prefix=recorded.prefix)

    torch.testing.assert_close(unhinted_logits, student, rtol=1e-4, atol=1e-4)  # the same context: the student
    assert (hinted_logits - student).abs().amax(-1).min() > 1e-3  # the hint moves every distilled token's logits


@pytest.mark.parametrize("context_grad", [True, False])
def test_pair_logps_of_prompts_sharing_nothing_one_of_a_single_token(model, tokenizer, context_grad):
    encode = tokenizer.encode
    pairs = [
        (encode("ls")[:1], encode("ran it"), encode("x")),
        (encode("run the tests please"), encode("submit"), encode("read_file calc/ops.py")),
    ]

    chosen, rejected = pair_logps(model, pairs, tokenizer.pad_token_id, context_grad=context_grad)

    want = full_forward_logps(model, pairs, tokenizer.pad_token_id)
    torch.testing.assert_close(torch.cat([chosen, rejected]).detach(), want.detach(), rtol=1e-4, atol=1e-4)
