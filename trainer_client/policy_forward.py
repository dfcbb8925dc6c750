"""Forward passes the SDPO and DPO channels need beside GRPOTrainer's fused one.

GRPOTrainer patches the model to return per-token logprobs without materialising logits. The extra
channels read what that forward already computed: its last hidden states (SDPO's student projects
only the rows it needs through the LM head) and its per-layer keys and values (a `Prefix`). New rows
continue from a prefix instead of rerunning it: the live-weights SDPO teacher runs only the hint
and the turn after the student's own context, and DPO pairs skip the system prompt they share with
the batch. Continuing is exact: the same weights, tokens and relative positions give the same keys
and values, and gradients reach the prefix through the recorded graph.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


def backbone_of(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack of a causal LM (`model.model` for Qwen2 and Llama)."""
    return getattr(model, model.base_model_prefix)


@dataclass
class Prefix:
    """Keys and values of rows already run through the model, to continue new rows from.

    Column c of row r holds a token at RoPE position `positions[r, c]` where `mask[r, c]` is 1; other
    columns are holes (padding) that nothing attends to.
    """

    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values (rows, kv_heads, width, head_dim)
    ids: torch.Tensor  # (rows, width) token ids
    mask: torch.Tensor  # (rows, width)
    positions: torch.Tensor  # (rows, width)

    @property
    def width(self) -> int:
        return self.mask.size(1)

    def detached(self) -> "Prefix":
        """The same prefix without its graph: continuations then send no gradient into it."""
        return Prefix([(k.detach(), v.detach()) for k, v in self.layers], self.ids, self.mask, self.positions)

    def take(self, rows: list[int], widths: list[int] | None = None) -> "Prefix":
        """New row i is row `rows[i]` cut to its first `widths[i]` columns (all of them by default)."""
        device = self.mask.device
        index = torch.tensor(rows, dtype=torch.long, device=device)
        width = self.width if widths is None else max(widths)
        mask = self.mask.index_select(0, index)[:, :width]
        if widths is not None:
            mask = mask * (torch.arange(width, device=device) < torch.tensor(widths, device=device).unsqueeze(1))
        layers = [(k.index_select(0, index)[:, :, :width], v.index_select(0, index)[:, :, :width]) for k, v in self.layers]
        ids, positions = (t.index_select(0, index)[:, :width] for t in (self.ids, self.positions))
        return Prefix(layers, ids, mask, positions)

    def next_positions(self) -> torch.Tensor:
        """The position of the token after each row's last real one (0 for an empty row)."""
        if self.width == 0:
            return torch.zeros(self.mask.size(0), dtype=torch.long, device=self.mask.device)
        last = torch.where(self.mask.bool(), self.positions, -1).amax(-1)
        return last + 1


def empty_prefix(rows: int, device: torch.device) -> Prefix:
    """A prefix with no columns: continuing from it is a plain forward."""
    empty = torch.zeros((rows, 0), dtype=torch.long, device=device)
    return Prefix([], empty, empty, empty)


def reuses_keys_and_values(model: torch.nn.Module) -> bool:
    """Whether a prefix of this model can be continued: every layer attends to the whole context."""
    layer_types = getattr(backbone_of(model).config, "layer_types", None)
    return not layer_types or all(kind == "full_attention" for kind in layer_types)


def continue_prefix(
    model: torch.nn.Module, prefix: Prefix, new_ids: list[list[int]], pad_token_id: int
) -> tuple[torch.Tensor, Prefix]:
    """Run `new_ids[i]` after prefix row i: the last hidden states (right-padded, (n, S, H)) and the longer prefix."""
    device = prefix.mask.device
    width = max(len(ids) for ids in new_ids)
    input_ids = torch.full((len(new_ids), width), pad_token_id, dtype=torch.long)
    new_mask = torch.zeros((len(new_ids), width), dtype=torch.long)
    for i, ids in enumerate(new_ids):
        input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        new_mask[i, : len(ids)] = 1
    input_ids, new_mask = input_ids.to(device), new_mask.to(device)
    positions = prefix.next_positions().unsqueeze(1) + torch.arange(width, device=device)
    backbone = backbone_of(model)
    cache = DynamicCache(ddp_cache_data=prefix.layers or None, config=backbone.config)
    mask = torch.cat([prefix.mask, new_mask], dim=1)
    hidden = backbone(
        input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
    ).last_hidden_state
    layers = [(layer.keys, layer.values) for layer in cache.layers]
    ids = torch.cat([prefix.ids, input_ids], dim=1)
    return hidden, Prefix(layers, ids, mask, torch.cat([prefix.positions, positions], dim=1))


@dataclass
class RecordedForward:
    """What the policy's training forward computed: last hidden states and, when asked, its keys and values."""

    hidden: list[torch.Tensor] = field(default_factory=list)
    prefixes: list[Prefix] = field(default_factory=list)

    @property
    def prefix(self) -> Prefix | None:
        """The batch's keys and values, when exactly one forward ran (GRPOTrainer's, unchunked)."""
        return self.prefixes[0] if len(self.prefixes) == 1 else None


@contextmanager
def recorded_forward(model: torch.nn.Module, keep_prefix: bool) -> Iterator[RecordedForward]:
    """Record the backbone's output (with its graph) of every forward this thread runs in the block.

    With `keep_prefix`, a cache is handed to the forward so that its keys and values stay readable;
    the forward's result is the same. Rollout workers generate with the same module from another
    thread; their forwards are neither changed nor recorded.
    """
    recorded = RecordedForward()
    thread = threading.get_ident()
    backbone = backbone_of(model)
    keep_prefix = keep_prefix and reuses_keys_and_values(model)
    pending: list[tuple[DynamicCache, torch.Tensor, torch.Tensor]] = []

    def give_cache(module, args, kwargs):
        if threading.get_ident() != thread or kwargs.get("past_key_values") is not None:
            return None
        input_ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if input_ids is None or mask is None or mask.dim() != 2:
            return None
        cache = DynamicCache(config=backbone.config)
        pending.append((cache, input_ids, mask))
        return args, {**kwargs, "past_key_values": cache}

    def keep(module, args, kwargs, output):
        if threading.get_ident() != thread:
            return
        recorded.hidden.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])
        if pending:
            cache, input_ids, mask = pending.pop()
            # transformers numbers the columns 0..width-1 when no position ids are given, padding included
            positions = torch.arange(mask.size(1), device=mask.device).expand_as(mask)
            layers = [(layer.keys, layer.values) for layer in cache.layers]
            recorded.prefixes.append(Prefix(layers, input_ids, mask, positions))

    handles = [backbone.register_forward_hook(keep, with_kwargs=True)]
    if keep_prefix:
        handles.append(backbone.register_forward_pre_hook(give_cache, with_kwargs=True))
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


def head_logits(model: torch.nn.Module, hidden: torch.Tensor, temperature: float) -> torch.Tensor:
    """Temperature-scaled float32 logits of hidden states (N, H) -> (N, V)."""
    return model.get_output_embeddings()(hidden).float() / temperature


def token_logps(model: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, rows_per_chunk: int = 64) -> torch.Tensor:
    """Logprob (temperature 1) of `targets[i]` after hidden state i, (N,); full-vocab logits live one chunk at a time."""
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
    model: torch.nn.Module,
    pairs: list[tuple[list[int], list[int], list[int]]],
    pad_token_id: int,
    prefix: Prefix | None = None,
    context_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed logprobs (temperature 1) of the chosen and rejected completions of (prompt, chosen, rejected) pairs.

    The start all prompts share runs once, continued from the longest start it has in common with a
    row of `prefix` (the batch's recorded forward); then the rest of each prompt; then both
    completions from that prompt's keys and values. With `context_grad`, gradients reach every
    prompt token through all of this, exactly as in one full forward per completion. Without it,
    the prompts run without gradient (about a third of their cost) and gradients flow only through
    the completion tokens (and the prompt's last token, whose state predicts the first one): an
    approximation that ignores how the loss would change the encoding of the context.
    Returns two tensors of shape (len(pairs),).
    """
    device = next(model.parameters()).device
    prompts = [prompt for prompt, _, _ in pairs]
    if any(not prompt or not chosen or not rejected for prompt, chosen, rejected in pairs):
        raise ValueError("every prompt and completion of a pair needs at least one token")
    # the last prompt token runs with the completions, so that its state carries gradient in both modes
    shared = min(_common_start(prompts), min(len(p) for p in prompts) - 1)
    with torch.set_grad_enabled(torch.is_grad_enabled() and context_grad):
        start = _shared_start(model, prefix if context_grad or prefix is None else prefix.detached(), prompts[0][:shared], pad_token_id, device)
        context = start.take([0] * len(pairs))
        rests = [prompt[shared:-1] for prompt in prompts]
        if any(rests):
            _, context = continue_prefix(model, context, rests, pad_token_id)
    completions = [[prompt[-1], *ids] for prompt, chosen, rejected in pairs for ids in (chosen, rejected)]
    hidden, _ = continue_prefix(model, context.take([i // 2 for i in range(len(completions))]), completions, pad_token_id)
    # position t predicts token t+1: each row's states 0..n-1 score its n completion tokens
    states = torch.cat([hidden[i, : len(ids) - 1] for i, ids in enumerate(completions)])
    targets = torch.tensor([t for ids in completions for t in ids[1:]], dtype=torch.long, device=device)
    totals = torch.stack([part.sum() for part in token_logps(model, states, targets).split([len(ids) - 1 for ids in completions])])
    return totals[0::2], totals[1::2]


def _common_start(rows: list[list[int]]) -> int:
    """How many leading tokens all rows share."""
    shortest = min(len(row) for row in rows)
    for i in range(shortest):
        if any(row[i] != rows[0][i] for row in rows):
            return i
    return shortest


def _shared_start(model: torch.nn.Module, prefix: Prefix | None, ids: list[int], pad_token_id: int, device) -> Prefix:
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
