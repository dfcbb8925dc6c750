"""Forward passes the SDPO and DPO channels need beside GRPOTrainer's fused one.

GRPOTrainer patches the model to return per-token logprobs without materialising logits. SDPO needs
whole next-token distributions on a few turns, so it reads the backbone's hidden states from the
same forward (a hook) and projects only the rows it needs through the LM head.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def backbone_of(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack of a causal LM (`model.model` for Qwen2 and Llama)."""
    return getattr(model, model.base_model_prefix)


@contextmanager
def captured_hidden_states(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the backbone's last hidden state (with its graph) of every forward this thread runs in the block.

    Rollout workers generate with the same module from another thread; their forwards are not collected.
    """
    captured: list[torch.Tensor] = []
    thread = threading.get_ident()

    def keep(module, args, output):
        if threading.get_ident() == thread:
            captured.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    handle = backbone_of(model).register_forward_hook(keep)
    try:
        yield captured
    finally:
        handle.remove()


def head_logits(model: torch.nn.Module, hidden: torch.Tensor, temperature: float) -> torch.Tensor:
    """Temperature-scaled float32 logits of hidden states (N, H) -> (N, V)."""
    return model.get_output_embeddings()(hidden).float() / temperature


def left_padded(rows: list[list[int]], pad_token_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids as one left-padded batch and its attention mask, so every row ends at the last column."""
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, width - len(row) :] = 1
    return input_ids.to(device), attention_mask.to(device)


def last_token_logits(
    model: torch.nn.Module,
    rows: list[list[int]],
    counts: list[int],
    pad_token_id: int,
    temperature: float,
    rows_per_pass: int = 4,
) -> torch.Tensor:
    """Logits predicting the last `counts[i]` tokens of each row, concatenated: (sum(counts), V)."""
    device = next(model.parameters()).device
    out = []
    for first in range(0, len(rows), rows_per_pass):
        chunk, chunk_counts = rows[first : first + rows_per_pass], counts[first : first + rows_per_pass]
        input_ids, attention_mask = left_padded(chunk, pad_token_id, device)
        hidden = backbone_of(model)(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        width = hidden.size(1)
        # position t predicts token t+1: the last n tokens are predicted from positions width-n-1 .. width-2
        picked = torch.cat([hidden[i, width - n - 1 : width - 1] for i, n in enumerate(chunk_counts)])
        out.append(head_logits(model, picked, temperature))
    return torch.cat(out)


def pair_logps(
    model: torch.nn.Module, pairs: list[tuple[list[int], list[int], list[int]]], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed logprobs (temperature 1) of the chosen and rejected completions of (prompt, chosen, rejected) pairs.

    Each prompt runs once; both completions continue from its KV cache, so gradients reach the
    prompt positions through both. Returns two tensors of shape (len(pairs),).
    """
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = left_padded([prompt for prompt, _, _ in pairs], pad_token_id, device)
    prompt_positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    prompt_out = model(
        input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=prompt_positions, use_cache=True, logits_to_keep=1
    )
    cache = prompt_out.past_key_values
    cache.batch_repeat_interleave(2)  # rows 2i and 2i+1 continue prompt i with its chosen and rejected completion
    completions = [ids for _, chosen, rejected in pairs for ids in (chosen, rejected)]
    width = max(len(ids) for ids in completions)
    completion_ids = torch.full((len(completions), width), pad_token_id, dtype=torch.long)
    completion_mask = torch.zeros((len(completions), width), dtype=torch.long)
    for i, ids in enumerate(completions):
        completion_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        completion_mask[i, : len(ids)] = 1
    completion_ids, completion_mask = completion_ids.to(device), completion_mask.to(device)
    lengths = prompt_mask.sum(-1).repeat_interleave(2)
    out = model(
        input_ids=completion_ids,
        attention_mask=torch.cat([prompt_mask.repeat_interleave(2, dim=0), completion_mask], dim=1),
        position_ids=lengths.unsqueeze(1) + torch.arange(width, device=device),
        past_key_values=cache,
        use_cache=True,
    )
    # the prompt's last logits predict each completion's first token, then each position predicts the next
    logits = torch.cat([prompt_out.logits[:, -1:].repeat_interleave(2, dim=0), out.logits[:, :-1]], dim=1)
    token_logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    totals = (token_logps * completion_mask).sum(-1)
    return totals[0::2], totals[1::2]
