"""Forward passes the SDPO and DPO channels need beside GRPOTrainer's fused one.

GRPOTrainer patches the model to return per-token logprobs without materialising logits. The extra
channels read what that forward already computed: its last hidden states (SDPO's student projects
only the rows it needs through the LM head) and its keys and values (`prefix_cache`): the
live-weights SDPO teacher runs only the hint and the turn after the student's own context, and DPO
pairs skip the system prompt they share with the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trainer_client.policy.even_forwards import Forwards
from trainer_client.policy.prefix_cache import Prefix, backbone_of, branched_hidden, continue_prefix, empty_prefix

if TYPE_CHECKING:  # annotations only: importing it loads transformers' modeling code, about a second
    from transformers import PreTrainedModel


def head_logits(model: PreTrainedModel, hidden: torch.Tensor, temperature: float) -> torch.Tensor:
    """Temperature-scaled float32 logits of hidden states (N, H) -> (N, V), with what the model family's own forward
    does after its LM head: Cohere's scale, Granite's divisor, Gemma's soft cap."""
    logits = model.get_output_embeddings()(hidden).float()
    config = model.config
    if getattr(config, "logit_scale", None):  # Cohere
        logits = logits * config.logit_scale
    if getattr(config, "logits_scaling", None):  # Granite
        logits = logits / config.logits_scaling
    cap = getattr(config, "final_logit_softcapping", None)  # Gemma 2 and 3
    if cap:
        logits = cap * torch.tanh(logits / cap)
    return logits / temperature


def token_logps(
    model: PreTrainedModel, hidden: torch.Tensor, targets: torch.Tensor, rows_per_chunk: int = 64
) -> torch.Tensor:
    """Logprob (temperature 1) of `targets[i]` after hidden state i, (N,); full-vocab logits live one chunk at a
    time."""
    out = []
    for first in range(0, hidden.size(0), rows_per_chunk):
        logits = head_logits(model, hidden[first : first + rows_per_chunk], 1.0)
        picked = logits.gather(-1, targets[first : first + rows_per_chunk].unsqueeze(-1)).squeeze(-1)
        out.append(picked - logits.logsumexp(-1))
    return torch.cat(out)


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
    model: PreTrainedModel,
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
    model: PreTrainedModel,
    pairs: list[tuple[list[int], list[int], list[int]]],
    pad_token_id: int,
    prefix: Prefix | None = None,
    context_grad: bool = True,
    share_start: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed logprobs (temperature 1) of the chosen and rejected completions of (prompt, chosen, rejected) pairs.

    The start all prompts share runs once, continued from the longest start it has in common with a
    row of `prefix` (the batch's recorded forward); then one row per pair runs the rest of its prompt
    and both completions side by side. With `context_grad`, gradients reach every prompt token,
    exactly as in one full forward per completion. Without it, the prompts run without gradient
    (a third of their cost, and none of their activations kept) and gradients flow only through the
    completion tokens and the prompt's last token, whose state predicts the first one: an
    approximation that ignores how the loss would change the encoding of the context.
    Without `share_start`, each row runs its whole prompt (no start shared, no `prefix` read), so no backward
    runs through another forward's keys and values: under FSDP2 that backward finds the layer's weights freed.
    Returns two tensors of shape (len(pairs),).
    """
    device = next(model.parameters()).device
    prompts = [prompt for prompt, _, _ in pairs]
    if any(not prompt or not chosen or not rejected for prompt, chosen, rejected in pairs):
        raise ValueError("every prompt and completion of a pair needs at least one token")
    shared = min(_common_start(prompts), min(len(p) for p in prompts) - 1) if share_start else 0  # each keeps one
    with torch.set_grad_enabled(torch.is_grad_enabled() and context_grad):
        start = _shared_start(
            model,
            prefix if context_grad or prefix is None else prefix.detached(),
            prompts[0][:shared],
            pad_token_id,
            device,
        )
        context = start.take([0] * len(pairs))
        trunks = [prompt[shared:] for prompt in prompts]
        if not context_grad:
            if any(len(trunk) > 1 for trunk in trunks):
                _, context = continue_prefix(model, context, [trunk[:-1] for trunk in trunks], pad_token_id)
            trunks = [trunk[-1:] for trunk in trunks]
    hidden = branched_hidden(
        model, context, trunks, [[chosen, rejected] for _, chosen, rejected in pairs], pad_token_id
    )
    states: list[torch.Tensor] = []
    targets: list[int] = []
    lengths: list[int] = []
    for row, (trunk, (_, chosen, rejected)) in enumerate(zip(trunks, pairs, strict=True)):
        at = len(trunk)
        for branch in (chosen, rejected):
            # the trunk's last state predicts the branch's first token, then each position the next
            states += [hidden[row, len(trunk) - 1 : len(trunk)], hidden[row, at : at + len(branch) - 1]]
            targets += branch
            lengths.append(len(branch))
            at += len(branch)
    target_ids = torch.tensor(targets, dtype=torch.long, device=device)
    totals = torch.stack([part.sum() for part in token_logps(model, torch.cat(states), target_ids).split(lengths)])
    return totals[0::2], totals[1::2]


def pair_forwards_at_most(context_grad: bool, share_start: bool) -> Forwards:
    """The most backbone forwards `pair_logps` runs, by whether autograd records them: the rest of the shared start
    (with `share_start`), the rest of the prompts (without `context_grad`), and the branches."""
    start = int(share_start)
    if not torch.is_grad_enabled():
        return Forwards(no_grad=start + 1 + int(not context_grad))
    return Forwards(grad=start + 1) if context_grad else Forwards(grad=1, no_grad=start + 1)


def _common_start(rows: list[list[int]]) -> int:
    """How many leading tokens all rows share."""
    shortest = min(len(row) for row in rows)
    for i in range(shortest):
        if any(row[i] != rows[0][i] for row in rows):
            return i
    return shortest


def _shared_start(model: PreTrainedModel, prefix: Prefix | None, ids: list[int], pad_token_id: int, device) -> Prefix:
    """A one-row prefix holding `ids`: the longest start of them a `prefix` row already has, then the rest run."""
    start = empty_prefix(1, device)
    if prefix is not None and ids:
        wanted = torch.tensor(ids, dtype=torch.long, device=device)
        best_row, best_length = 0, 0
        for row in range(prefix.mask.size(0)):
            real = prefix.ids[row][prefix.mask[row].bool()][: len(ids)]
            differs = (real != wanted[: real.numel()]).nonzero()
            length = int(differs[0]) if differs.numel() else real.numel()
            if length > best_length:
                best_row, best_length = row, length
        if best_length:
            columns = prefix.mask[best_row].nonzero().squeeze(1)
            start = prefix.take([best_row], [int(columns[best_length - 1]) + 1])
            ids = ids[best_length:]
    if ids:
        _, start = continue_prefix(model, start, [ids], pad_token_id)
    return start
