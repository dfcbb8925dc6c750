"""Forward passes the SDPO and DPO channels need beside GRPOTrainer's fused one.

GRPOTrainer patches the model to return per-token logprobs without materialising logits. SDPO needs
whole next-token distributions on a few turns, so it reads the backbone's hidden states from the
same forward (a hook) and projects only the rows it needs through the LM head.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def backbone_of(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack of a causal LM (`model.model` for Qwen2 and Llama)."""
    return getattr(model, model.base_model_prefix)


@contextmanager
def captured_hidden_states(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the backbone's last hidden state (with its graph) of every forward run inside the block."""
    captured: list[torch.Tensor] = []

    def keep(module, args, output):
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


def completion_logps(
    model: torch.nn.Module, sequences: list[tuple[list[int], list[int]]], pad_token_id: int
) -> torch.Tensor:
    """Summed logprob (temperature 1) of each completion after its prompt: shape (len(sequences),).

    Only the completion positions go through the LM head, so long contexts stay cheap in memory.
    """
    device = next(model.parameters()).device
    rows = [prompt + completion for prompt, completion in sequences]
    input_ids, attention_mask = left_padded(rows, pad_token_id, device)
    hidden = backbone_of(model)(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    width = hidden.size(1)
    totals = []
    for i, (_, completion) in enumerate(sequences):
        n = len(completion)
        logprobs = torch.log_softmax(head_logits(model, hidden[i, width - n - 1 : width - 1], 1.0), dim=-1)
        targets = torch.tensor(completion, dtype=torch.long, device=device)
        totals.append(logprobs.gather(-1, targets.unsqueeze(-1)).sum())
    return torch.stack(totals)
