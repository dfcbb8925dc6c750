"""Replay preference pairs: the JSONL `regrow replay` writes and the DPO channel reads."""

import itertools
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proto.actions import ToolCall
from trainer_client.rollout.chat_tokens import end_of_turn_id


class ChatMessage(BaseModel):
    """One chat message of the context the student saw."""

    model_config = ConfigDict(extra="forbid")

    role: str
    content: str


FULL_PRECISION = "float32"
BF16_AUTOCAST = "bf16-autocast"


class PreferencePair(BaseModel):
    """At one step of a recorded episode, the teachers' consensus action beats the student's."""

    trace_id: str = Field(description="episode_id of the recorded episode.")
    task_id: str
    step_index: int = Field(description="Index of the step whose action is replaced.")
    context: list[ChatMessage] = Field(description="The chat the student had before acting.")
    chosen: ToolCall = Field(description="The action the agreeing teachers took.")
    rejected: ToolCall = Field(description="The action the student took.")
    chosen_text: str = Field(description="The assistant message that carries `chosen`, in canonical form.")
    rejected_text: str = Field(
        description="The assistant message that carries `rejected`, in the same canonical form as chosen_text "
        "(the student's raw text only when its turn held no parseable call)."
    )
    reference_chosen_logp: float = Field(description="Summed logprob of chosen_text under the policy.")
    reference_rejected_logp: float = Field(description="Summed logprob of rejected_text under the policy.")
    chosen_tokens: int = Field(ge=1, description="Completion length the reference logprob covers.")
    rejected_tokens: int = Field(ge=1, description="Completion length the reference logprob covers.")
    reference_policy: str = Field(description="The model the reference logprobs were computed with.")
    reference_weights: str = Field(description="sha256 of that model's weights; training checks it is the policy's.")
    reference_dtype: str = Field(description="dtype of those weights (float32, bfloat16, ...); checked the same way.")
    reference_precision: str = Field(
        default=FULL_PRECISION,
        description="How the reference forward computed: float32, or bf16-autocast (a GPU run's). Training scores "
        "the pairs again at its own precision when they differ.",
    )
    teachers: list[str] = Field(description="Names of the teachers that chose `chosen`.")
    agreement: float = Field(ge=0, le=1, description="Share of the queried teachers that agreed.")

    def messages(self) -> list[dict[str, Any]]:
        """The context as the dicts a chat template takes."""
        return [message.model_dump() for message in self.context]


@dataclass
class EncodedPair:
    """A pair as token ids: one prompt and the two completions scored after it."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    reference_chosen_logp: float
    reference_rejected_logp: float


def completion_ids(tokenizer: Any, messages: list[dict[str, Any]], assistant_text: str) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) of `assistant_text` as the next assistant turn, via the chat template.

    The completion ends with the end-of-turn token: the policy stops there, so what the template adds after it
    (ChatML's newline) is no part of what the policy chose.
    """
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": assistant_text}], tokenize=True)
    prompt, full = _as_ids(prompt), _as_ids(full)
    if full[: len(prompt)] != prompt or len(full) == len(prompt):
        raise ValueError(
            "the chat template does not render the assistant turn as a suffix of the generation prompt; "
            "use a tokenizer whose template appends turns (ChatML, Qwen, Hermes)"
        )
    completion = full[len(prompt) :]
    end = end_of_turn_id(tokenizer)
    if end not in completion:
        raise ValueError(
            "the chat template does not close the assistant turn with its end-of-turn token; "
            "use a tokenizer whose template does (ChatML, Qwen, Hermes)"
        )
    return prompt, completion[: len(completion) - completion[::-1].index(end)]


def _as_ids(rendered: Any) -> list[int]:
    # transformers >= 4.5x may hand back a BatchEncoding instead of a list
    if isinstance(rendered, dict) or hasattr(rendered, "input_ids"):
        rendered = rendered["input_ids"]
    return list(rendered)


def encode_pair(pair: PreferencePair, tokenizer: Any) -> EncodedPair:
    """Tokenize a pair with the policy's chat template; fails if it is not the tokenizer that scored it."""
    messages = pair.messages()
    prompt_ids, chosen_ids = completion_ids(tokenizer, messages, pair.chosen_text)
    _, rejected_ids = completion_ids(tokenizer, messages, pair.rejected_text)
    if (len(chosen_ids), len(rejected_ids)) != (pair.chosen_tokens, pair.rejected_tokens):
        raise ValueError(
            f"pair {pair.trace_id}#{pair.step_index} tokenizes to {len(chosen_ids)}/{len(rejected_ids)} "
            f"completion tokens, but its reference logprobs cover {pair.chosen_tokens}/{pair.rejected_tokens}: "
            f"it was scored with {pair.reference_policy!r}; rerun `regrow replay` with the policy you train"
        )
    return EncodedPair(
        prompt_ids=prompt_ids,
        chosen_ids=chosen_ids,
        rejected_ids=rejected_ids,
        reference_chosen_logp=pair.reference_chosen_logp,
        reference_rejected_logp=pair.reference_rejected_logp,
    )


def write_pairs(path: Path, pairs: Iterable[PreferencePair]) -> int:
    """Write pairs as JSONL (one per line), replacing the file; returns how many."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as out:
        for pair in pairs:
            out.write(pair.model_dump_json() + "\n")
            count += 1
    return count


def read_pairs(path: Path) -> list[PreferencePair]:
    """Read a pairs JSONL file; a bad line fails with its line number."""
    pairs = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                pairs.append(PreferencePair.model_validate_json(line))
            except ValidationError as error:
                raise ValueError(f"{path}:{number} is not a PreferencePair: {error}") from error
    return pairs


class PairBatches(Iterator[list[PreferencePair]]):
    """Endless batches of pairs, reshuffled each pass, drawn beside the rollout batches.

    Every rank of a multi-process run draws the same step batch (one seed) and keeps its share, every `world`th pair
    from its `rank`: together the ranks train on the batch one process would, each pair once. With `micro_batches`
    (gradient accumulation) each `next` gives the next slice of that share, so a step's micro-batches train on the
    step batch once between them.
    """

    def __init__(
        self,
        pairs: Sequence[PreferencePair],
        batch_size: int,
        seed: int = 0,
        rank: int = 0,
        world: int = 1,
        micro_batches: int = 1,
    ) -> None:
        if not pairs:
            raise ValueError("PairBatches needs at least one pair; check the --pairs file")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside a world of {world} processes")
        self._pairs = list(pairs)
        self._batch_size = batch_size
        self._rng = random.Random(seed)
        self._order: list[int] = []
        self._rank, self._world = rank, world
        if batch_size < world * micro_batches:
            raise ValueError(
                f"{batch_size} pairs a step leave some of {world} processes x {micro_batches} micro-batches without a "
                f"pair: give at least {world * micro_batches}"
            )
        self._micro_batches = micro_batches
        self._slices: list[list[PreferencePair]] = []
        self.passes = 0

    def __next__(self) -> list[PreferencePair]:
        if not self._slices:
            share = self._step_share()
            size, extra = divmod(len(share), self._micro_batches)
            bounds = [0]
            for index in range(self._micro_batches):
                bounds.append(bounds[-1] + size + (index < extra))
            self._slices = [share[start:end] for start, end in itertools.pairwise(bounds)]
        return self._slices.pop(0)

    def _step_share(self) -> list[PreferencePair]:
        batch: list[PreferencePair] = []
        while len(batch) < self._batch_size:
            if not self._order:
                self._order = list(range(len(self._pairs)))
                self._rng.shuffle(self._order)
                self.passes += 1
            batch.append(self._pairs[self._order.pop()])
        return batch[self._rank :: self._world]
