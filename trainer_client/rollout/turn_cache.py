"""Keys and values of the turns the sampler already ran, so that an episode's next turn prefills only what is new.

An episode's context grows by whole turns: the next context is the last one, the turn the policy wrote, and the
env's reply. Without a cache each turn runs the whole context again: a single-function episode of SmolLM2 prefilled
about 5,700 tokens to write 1,700. An entry belongs to the weights' version it was computed under, and a new version
empties the cache, so a turn never continues from keys that other weights wrote.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicLayer

# Reusing fewer tokens saves less than the copies cost.
MIN_REUSED_TOKENS = 16

KeysAndValues = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (1, kv_heads, tokens, head_dim) each


@dataclass
class CachedTurn:
    ids: tuple[int, ...]
    layers: KeysAndValues


@dataclass
class PrefillInputs:
    """One batch's first forward: each row's cached tokens on the left of `past`, its new tokens in `input_ids`."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor  # over the cached columns and the new ones
    position_ids: torch.Tensor
    past: Cache | None
    reused: list[int]  # tokens of each row taken from the cache


class TurnCache:
    """The latest turns' keys and values, least recently used out first; `capacity` 0 keeps nothing."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.version: int | None = None
        self._entries: OrderedDict[tuple[int, ...], CachedTurn] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def longest_prefix(self, context: list[int], version: int) -> tuple[CachedTurn | None, int]:
        """The entry that shares the longest start with `context`, and how many of its tokens to reuse: never the
        whole context, whose last token must run to give the next token's logits."""
        self._follow(version)
        best, best_length = None, 0
        for entry in self._entries.values():
            length = _common_prefix(entry.ids, context)
            if length > best_length:
                best, best_length = entry, length
        usable = min(best_length, len(context) - 1)
        if best is None or usable < MIN_REUSED_TOKENS:
            return None, 0
        self._entries.move_to_end(best.ids)
        return best, usable

    def store(self, ids: tuple[int, ...], layers: KeysAndValues, version: int) -> None:
        """Keep a row's keys and values; the entries it continues are dropped, since it covers them."""
        self._follow(version)
        if not self.capacity:
            return
        for covered in [key for key in self._entries if len(key) <= len(ids) and ids[: len(key)] == key]:
            del self._entries[covered]
        self._entries[ids] = CachedTurn(ids, layers)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def _follow(self, version: int) -> None:
        if version != self.version:
            self._entries.clear()
            self.version = version


def prefill_inputs(contexts: list[list[int]], cached: list[tuple[CachedTurn | None, int]], pad_token_id: int):
    """Left-pad the cached part of each row into `past` and its new tokens into `input_ids`; the holes between are
    masked, and positions count each row's own tokens, as if the row had run whole."""
    rows = len(contexts)
    reused = [length for _, length in cached]
    cached_width = max(reused)
    width = max(len(context) - length for context, length in zip(contexts, reused))
    input_ids = torch.full((rows, width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((rows, cached_width + width), dtype=torch.long)
    for row, (context, length) in enumerate(zip(contexts, reused)):
        new = context[length:]
        input_ids[row, width - len(new) :] = torch.tensor(new)
        mask[row, cached_width - length : cached_width] = 1
        mask[row, cached_width + width - len(new) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, cached_width:]
    past = _padded_past(cached, cached_width) if cached_width else None
    return PrefillInputs(input_ids, mask, positions, past, reused)


def _padded_past(cached: list[tuple[CachedTurn | None, int]], width: int) -> Cache:
    layer_count = len(next(entry for entry, _ in cached if entry is not None).layers)
    return Cache(layers=[_padded_layer(cached, index, width) for index in range(layer_count)])


def _padded_layer(cached: list[tuple[CachedTurn | None, int]], index: int, width: int) -> DynamicLayer:
    """Layer `index` of every row, each row's cached columns on the right of `width`, zeros on the left."""
    keys, values = next(entry for entry, _ in cached if entry is not None).layers[index]
    shape = (len(cached), keys.size(1), width, keys.size(3))
    padded_keys, padded_values = keys.new_zeros(shape), values.new_zeros(shape)
    for row, (entry, length) in enumerate(cached):
        if entry is not None and length:
            padded_keys[row, :, width - length :] = entry.layers[index][0][0, :, :length]
            padded_values[row, :, width - length :] = entry.layers[index][1][0, :, :length]
    return layer_holding(padded_keys, padded_values)


def row_keys_and_values(cache: Cache, attention_mask: torch.Tensor, row: int, tokens: int) -> KeysAndValues:
    """Row `row`'s first `tokens` unmasked columns of every layer: the tokens it ran, in order, without holes (a
    copy: indexing by a tensor of columns copies, so the batch's cache can go)."""
    columns = attention_mask[row].nonzero().squeeze(-1)[:tokens]
    return [
        (keys[row : row + 1, :, columns], values[row : row + 1, :, columns])
        for keys, values in (keys_and_values(layer) for layer in cache.layers)
    ]


def layer_holding(keys: torch.Tensor, values: torch.Tensor) -> DynamicLayer:
    """A cache layer that starts with these keys and values."""
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


def keys_and_values(layer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """What a cache layer holds after a forward; every layer of a full-attention model holds keys and values."""
    if not isinstance(layer, DynamicLayer) or layer.keys is None or layer.values is None:
        raise RuntimeError(f"a {type(layer).__name__} cache layer holds no keys and values after the forward")
    return layer.keys, layer.values


def _common_prefix(left: tuple[int, ...], right: list[int]) -> int:
    length = 0
    for a, b in zip(left, right):
        if a != b:
            break
        length += 1
    return length
