"""`regrow bench gpu`: the trainer's step on recorded token batches, on random-init models of real shapes, no env.

A GPU box often has no Docker engine and no network. This replays episodes a CPU run recorded (`regrow train
--record-tokens`; `recorded_episodes.jsonl` beside this module is one) on a model of a shipped shape
(`trainer_client/train/model_shapes`, random weights made on the device, nothing downloaded), and times the real
optimizer step of each channel mix. No tokenizer is needed: a stand-in over the recording's ids decodes them for TRL,
and the hints SDPO conditions on were recorded as ids.

The sampler's logprobs are the model's own in pure bf16, as a bf16 sampler (vLLM) reports them; the trainer computes
at its own precision (fp32 weights under bf16 autocast), so the IS ratios and clip statistics are an on-policy step's.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proto import EpisodeTokens, ToolCall
from proto.traces import HintedTurnTokens
from trainer_client.train.ladder_recipes import RECIPES
from trainer_client.train.memory_plan import PROMPT_TOKENS, SHAPES

RECORDING = Path(__file__).with_name("recorded_episodes.jsonl")
# A shape small enough for the CPU lane: the same code path, a second a step.
TINY_SHAPE: dict[str, Any] = {
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}
MIXES: dict[str, dict[str, Any]] = {
    "rlvr": {},
    "rlvr+sdpo": {"alpha_sdpo": 1.0, "sdpo_teacher": "live"},
    "rlvr+dpo": {"beta_dpo": 0.1},
    "all": {"alpha_sdpo": 1.0, "sdpo_teacher": "live", "beta_dpo": 0.1},
}
PPO_EPSILON = 0.2  # TRL's default clip range: a ratio outside [0.8, 1.2] is clipped on one side
IS_CAP = 3.0  # the trainer's `delta`: a ratio past it gets no gradient
GIB = 2**30


@dataclass(frozen=True)
class ShapeRun:
    """How one shape trains on one GPU: in full, or (too big for that) LoRA over bf16 weights."""

    shape: str
    lora_r: int = 0
    weights_dtype: str = "float32"

    @classmethod
    def parse(cls, text: str) -> ShapeRun:
        """`qwen2.5-1.5b`, or `qwen2.5-7b:lora16:bf16` (a LoRA rank, bf16 weights)."""
        name, *options = text.split(":")
        if name != "tiny" and not (SHAPES / f"{name}.json").is_file():
            names = ", ".join(["tiny", *sorted(p.stem for p in SHAPES.glob("*.json"))])
            raise ValueError(f"--shape {text!r}: no shape {name!r}; the shipped ones are {names}")
        lora, dtype = 0, "float32"
        for option in options:
            if option.startswith("lora") and option[4:].isdigit():
                lora = int(option[4:])
            elif option == "bf16":
                dtype = "bfloat16"
            else:
                raise ValueError(f"--shape {text!r}: unknown option {option!r}; use lora<rank> and bf16")
        return cls(name, lora, dtype)

    @property
    def label(self) -> str:
        """The shape as --shape names it."""
        lora = [f"lora{self.lora_r}"] if self.lora_r else []
        return ":".join([self.shape, *lora, *(["bf16"] if self.weights_dtype == "bfloat16" else [])])


# What fits one 80 GB GPU as `regrow train --plan` reckons it: 0.5B and 1.5B in full, 7B LoRA over bf16 weights.
DEFAULT_SHAPES = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b:lora16:bf16")
# A real step's row on one GPU: the gpu-1x80gb recipe's completion after the prompt `regrow train --plan` assumes.
RECIPE_ROW_TOKENS = PROMPT_TOKENS + RECIPES["gpu-1x80gb"].train["max_completion_tokens"]


def default_shapes(device: str) -> tuple[str, ...]:
    """The shipped shapes on a GPU; on a CPU only the tiny one, as a shipped shape's step outgrows a host's memory."""
    return DEFAULT_SHAPES if device == "cuda" else ("tiny",)


def read_recording(path: Path, rows: int) -> list[EpisodeTokens]:
    """The first `rows` episodes recorded in `path`; ValueError saying what to do when it has too few."""
    if not path.is_file():
        raise ValueError(f"{path}: no such recording; write one with `regrow train --record-tokens`")
    episodes = [EpisodeTokens.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]
    if len(episodes) < rows:
        raise ValueError(f"{path} holds {len(episodes)} episodes and a step needs {rows}: give --rows {len(episodes)}")
    return episodes[:rows]


def stretched(episode: EpisodeTokens, row_tokens: int) -> EpisodeTokens:
    """A copy of `episode` whose completion repeats (turns, env tokens, logprobs and hints alike) until prompt and
    completion hold `row_tokens`, cut there; a hinted turn the cut would split is left out. A longer row is kept."""
    copy = episode.model_copy(deep=True)
    width = len(episode.completion_ids)
    target = row_tokens - len(episode.prompt_ids)
    if width == 0 or target <= width:
        return copy
    repeats = -(-target // width)
    copy.completion_ids = (episode.completion_ids * repeats)[:target]
    copy.logprobs = (episode.logprobs * repeats)[:target]
    copy.env_mask = (episode.env_mask * repeats)[:target]
    copy.hinted_turns = [
        HintedTurnTokens(
            hint_at=turn.hint_at + offset,
            start=turn.start + offset,
            end=turn.end + offset,
            hint_ids=list(turn.hint_ids),
        )
        for offset in range(0, repeats * width, width)
        for turn in episode.hinted_turns
        if turn.end + offset <= target
    ]
    return copy


def rewards_that_train(episodes: list[EpisodeTokens], group_size: int) -> int:
    """Give each group whose recorded rewards are all the same (or missing) alternating rewards 0 and 1, so that RLVR
    has a gradient to compute: a zero-variance group has none, and its step would cost less than a training one.
    Returns how many groups were changed."""
    changed = 0
    for first in range(0, len(episodes), group_size):
        group = episodes[first : first + group_size]
        if len({episode.reward for episode in group}) > 1 and all(e.reward is not None for e in group):
            continue
        changed += 1
        for index, episode in enumerate(group):
            episode.reward = float(index % 2)
    return changed


def compact_ids(episodes: list[EpisodeTokens]) -> list[EpisodeTokens]:
    """Copies of `episodes` whose ids are renumbered densely, in order of first use: the same sequences over the few
    thousand ids a recording uses, so that the tiny shape's logits are not a 50k-wide vocabulary's (CPU seconds)."""
    dense: dict[int, int] = {}

    def renumber(ids: list[int]) -> list[int]:
        return [dense.setdefault(i, len(dense)) for i in ids]

    copies = []
    for episode in episodes:
        copy = episode.model_copy(deep=True)
        copy.prompt_ids, copy.completion_ids = renumber(copy.prompt_ids), renumber(copy.completion_ids)
        for turn in copy.hinted_turns:
            turn.hint_ids = renumber(turn.hint_ids)
        copies.append(copy)
    return copies


def stand_in_tokenizer(episodes: list[EpisodeTokens]) -> Any:
    """A tokenizer over the recording's ids (`t<id>`) with a pad token of its own past them: all TRL needs of one
    here (it decodes completions for reward functions, and pads)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    top = max(
        max(e.prompt_ids + e.completion_ids + [i for turn in e.hinted_turns for i in turn.hint_ids]) for e in episodes
    )
    model = Tokenizer(WordLevel({f"t{i}": i for i in range(top + 1)} | {"<pad>": top + 1}, unk_token="<pad>"))
    model.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", eos_token="<pad>")
    tokenizer.padding_side = "left"
    return tokenizer


def replay_rows(episodes: list[EpisodeTokens]) -> dict[str, list]:
    """rollout_func's output for the recorded batch, as trainer_client.rollout.rows builds it from live episodes."""
    from trainer_client.rollout.rows import HintedTurn, RolloutRow, rollout_columns

    return rollout_columns(
        [
            RolloutRow(
                prompt_ids=e.prompt_ids,
                completion_ids=e.completion_ids,
                logprobs=e.logprobs,
                env_mask=e.env_mask,
                env_reward=e.reward or 0.0,  # an episode recorded ungraded counts 0
                sdpo_turns=[HintedTurn(t.hint_at, t.start, t.end, tuple(t.hint_ids)) for t in e.hinted_turns],
                stop_reason="done",
                policy_version=0,
            )
            for e in episodes
        ]
    )


def shape_config(run: ShapeRun, vocab: int) -> dict[str, Any]:
    """The model config of `run`'s shape, its vocabulary wide enough for ids below `vocab`."""
    shipped = SHAPES / f"{run.shape}.json"
    shape: dict[str, Any] = dict(TINY_SHAPE) if run.shape == "tiny" else json.loads(shipped.read_text())
    shape["vocab_size"] = max(shape.get("vocab_size", 0), vocab)
    return shape


def random_model(run: ShapeRun, vocab: int, device: str, seed: int) -> Any:
    """A random-init causal LM of `run`'s shape, made on `device` (a 7B model in seconds, no host copy)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = shape_config(run, vocab)
    config = AutoConfig.for_model(shape.pop("model_type"), **shape)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, run.weights_dtype))
    if run.lora_r:
        from trainer_client.policy.lora_adapter import with_lora

        model = with_lora(model, run.lora_r, None, 0.0, "all-linear")
    return model


def _autocast(device: str) -> Any:
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()


def _completion_logps(model: Any, episode: EpisodeTokens, device: str) -> Any:
    """The model's logprob of each completion token given all before it (temperature 1), as float32."""
    import torch

    ids = torch.tensor([episode.prompt_ids + episode.completion_ids], device=device)
    logits = model(input_ids=ids).logits[0, len(episode.prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, len(episode.prompt_ids) :, None])[:, 0]


def sample_in_bf16(model: Any, episodes: list[EpisodeTokens], device: str) -> dict[str, float]:
    """Set each episode's logprobs to a bf16 sampler's (the model's own, its weights in bf16), and compare them with
    the trainer's precision (bf16 autocast over the weights as they are; float32 on a CPU): the on-policy gap, and
    the IS ratio pi_train / pi_sampler, with the shares PPO's clip and the IS cap act on."""
    import copy

    import torch

    sampler = copy.deepcopy(model).to(torch.bfloat16)
    gaps, ratios = [], []
    with torch.no_grad():
        for episode in episodes:
            with _autocast(device):
                trained = _completion_logps(model, episode, device)
            sampled = _completion_logps(sampler, episode, device)
            policy = torch.tensor(episode.env_mask, device=device, dtype=torch.bool)
            episode.logprobs = torch.where(policy, sampled, 0.0).tolist()
            gap = (trained - sampled)[policy]
            gaps.append(gap.abs())
            ratios.append(gap.exp())
    del sampler
    gap, ratio = torch.cat(gaps), torch.cat(ratios)
    return {
        "policy_tokens": int(gap.numel()),
        "logprob_gap_mean": round(float(gap.mean()), 5),
        "logprob_gap_max": round(float(gap.max()), 5),
        "is_ratio_mean": round(float(ratio.mean()), 5),
        "is_ratio_min": round(float(ratio.min()), 5),
        "is_ratio_max": round(float(ratio.max()), 5),
        "clipped_share": round(float(((ratio < 1 - PPO_EPSILON) | (ratio > 1 + PPO_EPSILON)).float().mean()), 6),
        "past_is_cap_share": round(float((ratio > IS_CAP).float().mean()), 6),
    }


def policy_spans(env_mask: list[int]) -> Iterator[tuple[int, int]]:
    """The [start, end) runs of policy tokens: one per turn."""
    start = None
    for index, bit in enumerate([*env_mask, 0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            yield start, index
            start = None


def replay_pairs(model: Any, episodes: list[EpisodeTokens], count: int, device: str) -> list[tuple[Any, Any]]:
    """`count` DPO pairs from the recording, each a (PreferencePair, EncodedPair): the context is an episode up to one
    of its turns, chosen that turn, rejected another episode's turn; reference logprobs at training precision."""
    import torch

    from trainer_client.channels.dpo_loss import completion_logps
    from trainer_client.channels.preference_pairs import EncodedPair, PreferencePair

    spans = [(e, start, end) for e in episodes for start, end in policy_spans(e.env_mask)]
    if len(spans) < 2:
        raise ValueError("the recording has fewer than two policy turns: DPO pairs need two")
    pairs = []
    for index in range(count):
        episode, start, end = spans[index % len(spans)]
        other, other_start, other_end = spans[(index + 1) % len(spans)]
        prompt = episode.prompt_ids + episode.completion_ids[:start]
        chosen, rejected = episode.completion_ids[start:end], other.completion_ids[other_start:other_end]
        with torch.no_grad(), _autocast(device):
            reference = completion_logps(model, [(prompt, chosen), (prompt, rejected)], 0).tolist()
        name, call = f"replay-{index}", ToolCall(tool="submit", args={})
        pair = PreferencePair(
            trace_id=name,
            task_id="replay",
            step_index=index,
            context=[],
            chosen=call,
            rejected=call,
            chosen_text=name,
            rejected_text=name,
            reference_chosen_logp=reference[0],
            reference_rejected_logp=reference[1],
            chosen_tokens=len(chosen),
            rejected_tokens=len(rejected),
            reference_policy="replay",
            reference_weights="replay",
            reference_dtype="replay",
            teachers=["replay"],
            agreement=1.0,
        )
        pairs.append((pair, EncodedPair(prompt, chosen, rejected, reference[0], reference[1])))
    return pairs
