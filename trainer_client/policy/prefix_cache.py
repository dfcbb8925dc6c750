"""Keys and values of tokens the policy already ran, and new rows continued from them.

GRPOTrainer's forward runs every token of the batch; the SDPO teacher and the DPO pairs then need
contexts that start with some of those tokens (a student's turns, the system prompt). A `Prefix`
holds a forward's per-layer keys and values; continuing from it gives the same hidden states as
running the whole sequence (same weights, tokens and relative positions), and gradients reach the
prefix through the recorded graph unless it is detached.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.masking_utils import create_causal_mask

from trainer_client.policy.lora_adapter import causal_lm
from trainer_client.rollout.turn_cache import keys_and_values, layer_holding

if TYPE_CHECKING:  # annotations only: importing it loads transformers' modeling code, about a second
    from torch.nn.attention.flex_attention import BlockMask
    from transformers import PreTrainedModel


def backbone_of(model: PreTrainedModel) -> PreTrainedModel:
    """The decoder stack of a causal LM (`model.model` for Qwen2 and Llama), under a LoRA wrapper too."""
    lm = causal_lm(model)
    return getattr(lm, lm.base_model_prefix)


@dataclass
class Prefix:
    """Keys and values of rows already run through the model, to continue new rows from.

    Column c of row r holds token `ids[r, c]` at RoPE position `positions[r, c]` where `mask[r, c]`
    is 1; other columns are holes (padding) that nothing attends to.
    """

    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values (rows, kv_heads, width, head_dim)
    ids: torch.Tensor  # (rows, width)
    mask: torch.Tensor  # (rows, width)
    positions: torch.Tensor  # (rows, width)

    @property
    def width(self) -> int:
        return self.mask.size(1)

    def detached(self) -> Prefix:
        """The same prefix without its graph: continuations then send no gradient into it."""
        return Prefix([(k.detach(), v.detach()) for k, v in self.layers], self.ids, self.mask, self.positions)

    def take(self, rows: list[int], widths: list[int] | None = None) -> Prefix:
        """New row i is row `rows[i]` cut to its first `widths[i]` columns (all of them by default)."""
        device = self.mask.device
        width = self.width if widths is None else max(widths)
        index = torch.tensor(rows, dtype=torch.long, device=device)

        def pick(tensor: torch.Tensor, column_dim: int) -> torch.Tensor:
            tensor = tensor.narrow(column_dim, 0, width)
            if len(set(rows)) == 1:  # a view: nothing is copied, and the backward adds into one row
                return tensor[rows[0] : rows[0] + 1].expand(len(rows), *tensor.shape[1:])
            return tensor.index_select(0, index)

        layers = [(pick(keys, 2), pick(values, 2)) for keys, values in self.layers]
        mask = pick(self.mask, 1)
        if widths is not None:
            mask = mask * (torch.arange(width, device=device) < torch.tensor(widths, device=device).unsqueeze(1))
        return Prefix(layers, pick(self.ids, 1), mask, pick(self.positions, 1))

    def next_positions(self) -> torch.Tensor:
        """The position of the token after each row's last real one (0 for an empty row)."""
        if self.width == 0:
            return torch.zeros(self.mask.size(0), dtype=torch.long, device=self.mask.device)
        return torch.where(self.mask.bool(), self.positions, -1).amax(-1) + 1


def empty_prefix(rows: int, device: torch.device) -> Prefix:
    """A prefix with no columns: continuing from it is a plain forward."""
    empty = torch.zeros((rows, 0), dtype=torch.long, device=device)
    return Prefix([], empty, empty, empty)


def reuseskeys_and_values(model: PreTrainedModel) -> bool:
    """Whether a prefix of this model can be continued: every layer attends to the whole context."""
    layer_types = getattr(backbone_of(model).config, "layer_types", None)
    return not layer_types or all(kind == "full_attention" for kind in layer_types)


def continue_prefix(
    model: PreTrainedModel, prefix: Prefix, new_ids: list[list[int]], pad_token_id: int
) -> tuple[torch.Tensor, Prefix]:
    """Run `new_ids[i]` after prefix row i: the last hidden states (right-padded, (n, S, H)) and the longer prefix."""
    input_ids, new_mask = _right_padded(new_ids, pad_token_id, prefix.mask.device)
    positions = prefix.next_positions().unsqueeze(1) + torch.arange(input_ids.size(1), device=input_ids.device)
    hidden, layers = _forward(model, prefix, input_ids, new_mask, positions)
    mask = torch.cat([prefix.mask, new_mask], dim=1)
    return hidden, Prefix(
        layers, torch.cat([prefix.ids, input_ids], 1), mask, torch.cat([prefix.positions, positions], 1)
    )


def branched_hidden(
    model: PreTrainedModel, prefix: Prefix, trunks: list[list[int]], branches: list[list[list[int]]], pad_token_id: int
) -> torch.Tensor:
    """Hidden states of row i = trunks[i] then each of branches[i], right-padded: (n, S, H).

    Every branch continues the prefix and the trunk on its own: it neither sees the other branches
    nor shifts their positions. One row per trunk is cheaper than one row per branch, which would
    copy the prefix and rerun the trunk for each.
    """
    rows = [
        trunk + [t for branch in row_branches for t in branch]
        for trunk, row_branches in zip(trunks, branches, strict=True)
    ]
    device = prefix.mask.device
    input_ids, new_mask = _right_padded(rows, pad_token_id, device)
    start = prefix.next_positions().tolist()
    positions = torch.zeros_like(input_ids)
    nodes = torch.zeros((len(rows), prefix.width + input_ids.size(1)), dtype=torch.long)
    for i, (trunk, row_branches) in enumerate(zip(trunks, branches, strict=True)):
        positions[i, : len(trunk)] = torch.arange(len(trunk)) + start[i]
        column = len(trunk)
        for node, branch in enumerate(row_branches, start=1):
            positions[i, column : column + len(branch)] = torch.arange(len(branch)) + start[i] + len(trunk)
            nodes[i, prefix.width + column : prefix.width + column + len(branch)] = node
            column += len(branch)
    return _forward(model, prefix, input_ids, new_mask, positions.to(device), nodes.to(device))[0]


def _right_padded(rows: list[list[int]], pad_token_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return input_ids.to(device), mask.to(device)


def _forward(
    model: PreTrainedModel,
    prefix: Prefix,
    input_ids: torch.Tensor,
    new_mask: torch.Tensor,
    positions: torch.Tensor,
    nodes: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The backbone on new tokens after the prefix; `nodes` (0 shared, k branch k) keeps branches apart."""
    backbone = backbone_of(model)
    if prefix.layers:
        cache = Cache(layers=[layer_holding(keys, values) for keys, values in prefix.layers])
    else:
        cache = Cache(layers=[DynamicLayer() for _ in range(backbone.config.num_hidden_layers)])
    mask = torch.cat([prefix.mask, new_mask], dim=1)
    attention: torch.Tensor | BlockMask | None = mask
    if nodes is not None:

        def same_branch(batch_idx, head_idx, q_idx, kv_idx):
            kv_node = nodes[batch_idx, kv_idx]
            return (kv_node == 0) | (kv_node == nodes[batch_idx, q_idx])

        embeds = torch.empty((*input_ids.shape, 1), dtype=backbone.dtype, device=input_ids.device)
        attention = create_causal_mask(backbone.config, embeds, mask, cache, positions, and_mask_function=same_branch)
    hidden = backbone(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, past_key_values=cache, use_cache=True
    ).last_hidden_state
    return hidden, [keys_and_values(layer) for layer in cache.layers]


class _KeptLayer(DynamicLayer):
    """A cache layer that keeps one forward's keys and values as they are (DynamicLayer would copy them)."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.is_initialized:
            raise RuntimeError("a recording cache holds a single forward")
        self.lazy_initialization(key_states, value_states)
        self.keys, self.values = key_states, value_states
        return key_states, value_states


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
def recorded_forward(model: PreTrainedModel, keep_prefix: bool) -> Iterator[RecordedForward]:
    """Record the backbone's output (with its graph) of every forward this thread runs in the block.

    With `keep_prefix`, a cache is handed to the forward so that its keys and values stay readable;
    the forward's result is the same. Rollout workers generate with the same module from another
    thread; their forwards are neither changed nor recorded.
    """
    recorded = RecordedForward()
    thread = threading.get_ident()
    backbone = backbone_of(model)
    keep_prefix = keep_prefix and reuseskeys_and_values(model)
    pending: list[tuple[Cache, torch.Tensor, torch.Tensor]] = []

    def give_cache(module, args, kwargs):
        if threading.get_ident() != thread or kwargs.get("past_key_values") is not None:
            return None
        input_ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if input_ids is None or mask is None or mask.dim() != 2:
            return None
        cache = Cache(layers=[_KeptLayer() for _ in range(backbone.config.num_hidden_layers)])
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
