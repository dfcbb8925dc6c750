"""Teach a tiny model one reply, so that a local teacher answers a known tool call in any replay context."""

from pathlib import Path

from proto.actions import ToolCall
from proto.transcript import format_tool_call, transcript
from tests.replay.recorded_traces import recorded_traces
from trainer_client.channels.preference_pairs import completion_ids

READ_CORE = ToolCall(tool="read_file", args={"path": "mathlib/core.py"})
RUN_TESTS = ToolCall(tool="run", args={"command": "python -m pytest -q"})
WHOLE_REPLIES = (format_tool_call(READ_CORE), format_tool_call(RUN_TESTS))


def replay_contexts() -> list[list[dict[str, str]]]:
    """Every context the replay tests show a teacher: each step prefix of the recorded traces."""
    return [transcript(trace, before_step=step.index) for trace in recorded_traces() for step in trace.steps]


def train_tool_caller(base: Path, out: Path, reply: str, max_steps: int = 100, contexts: list | None = None) -> Path:
    """Fine-tune the model in `base` until its greedy reply to every replay context (and every one of `contexts`) is
    `reply`; save to `out`.

    `reply` should be one of the base tokenizer's whole-reply tokens, which keeps this to a few steps.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(0)
    examples = [completion_ids(tokenizer, context, reply) for context in replay_contexts() + (contexts or [])]
    width = max(len(p) + len(c) for p, c in examples)
    input_ids = torch.full((len(examples), width), tokenizer.pad_token_id)
    labels = torch.full((len(examples), width), -100)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (prompt, completion) in enumerate(examples):
        ids = torch.tensor(prompt + completion)
        input_ids[row, : len(ids)] = ids
        labels[row, len(prompt) : len(ids)] = torch.tensor(completion)
        attention_mask[row, : len(ids)] = 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(max_steps):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        predicted = logits[:, :-1].argmax(-1)
        targets = labels[:, 1:]
        if (predicted[targets != -100] == targets[targets != -100]).all():
            break
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), targets, ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    else:
        raise RuntimeError(f"the tiny teacher did not learn {reply!r} in {max_steps} steps")
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def relabel_reply(trained: Path, out: Path, learned_reply: str, new_reply: str) -> Path:
    """A copy of `trained` that answers `new_reply` wherever it answered `learned_reply`.

    Both are whole-reply tokens; swapping their embedding rows (tied with the output head)
    relabels the two tokens, so the model's learned habit now ends in `new_reply`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(trained)
    model = AutoModelForCausalLM.from_pretrained(trained)
    first, second = tokenizer.convert_tokens_to_ids([learned_reply, new_reply])
    if tokenizer.unk_token_id in (first, second) or first is None or second is None:
        raise ValueError("both replies must be whole-reply tokens of the tokenizer")
    with torch.no_grad():
        rows = model.get_input_embeddings().weight
        rows[[first, second]] = rows[[second, first]].clone()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
