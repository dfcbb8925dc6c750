"""Token ids of an episode under the policy's chat template, built turn by turn without re-tokenizing.

The policy's own tokens are kept as generated; only the messages between turns (tool responses,
the generation prompt, SDPO hints) are rendered, as the difference of two template renderings.
"""

from dataclasses import dataclass
from typing import Any

from trainer_client.rollout.chat_format import hint_message

_DUMMY = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]


@dataclass(frozen=True)
class EnvSegment:
    """The env's tokens between two turns: the tool response, then the next generation prompt."""

    response_ids: list[int]
    generation_prompt_ids: list[int]


class EpisodeTokenizer:
    """Renders episode messages into token ids with one tokenizer's chat template."""

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the policy's tokenizer has no chat template; give it one (e.g. ChatML) before training")
        self.tokenizer = tokenizer
        self.end_of_turn_id = end_of_turn_id(tokenizer)
        self.stop_ids = sorted({self.end_of_turn_id, tokenizer.eos_token_id} - {None})
        self._closed_dummy = self._ids(_DUMMY, generation_prompt=False)
        # The end-of-turn token closes an assistant message; what the template adds after it is env text.
        last_end = max(i for i, t in enumerate(self._closed_dummy) if t == self.end_of_turn_id)
        self._turn_prefix = self._closed_dummy[: last_end + 1]

    def _ids(self, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=generation_prompt, return_dict=False
        )
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def _suffix(self, longer: list[int], prefix: list[int], what: str) -> list[int]:
        if longer[: len(prefix)] != prefix:
            raise ValueError(
                f"the chat template does not render {what} as a pure suffix; it cannot be used for training"
            )
        return longer[len(prefix) :]

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The first context: the messages and the generation prompt."""
        return self._ids(messages, generation_prompt=True)

    def first_generation_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """The generation prompt that ends the first context (a hint about the first turn goes before it)."""
        with_prompt = self._ids(messages, generation_prompt=True)
        return self._suffix(with_prompt, self._ids(messages, generation_prompt=False), "the generation prompt")

    def env_segment(self, response: dict[str, str]) -> EnvSegment:
        """Tokens after a closed assistant turn: the tool response message, then the generation prompt."""
        with_response = self._ids([*_DUMMY, response], generation_prompt=False)
        with_prompt = self._ids([*_DUMMY, response], generation_prompt=True)
        return EnvSegment(
            response_ids=self._suffix(with_response, self._turn_prefix, "a tool response"),
            generation_prompt_ids=self._suffix(with_prompt, with_response, "the generation prompt"),
        )

    def hint_ids(self, feedback: str) -> list[int]:
        """Tokens of the hint message, as rendered after a tool response message."""
        response = {"role": "user", "content": "r"}
        before = self._ids([*_DUMMY, response], generation_prompt=False)
        after = self._ids([*_DUMMY, response, hint_message(feedback)], generation_prompt=False)
        return self._suffix(after, before, "a hint message")

    def assistant_masked(self, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
        """The whole conversation's ids, and a mask with 1 on each assistant message's tokens (its content and the
        end of its turn, not the generation prompt before it): what supervised fine-tuning trains on."""
        ids: list[int] = []
        mask: list[int] = []
        for index, message in enumerate(messages):
            if message["role"] == "assistant":
                prompt = self._ids(messages[:index], generation_prompt=True)
                ahead = self._suffix(prompt, ids, "a generation prompt")
                ids, mask = prompt, mask + [0] * len(ahead)
            closed = self._ids(messages[: index + 1], generation_prompt=False)
            added = self._suffix(closed, ids, f"a {message['role']} message")
            ids, mask = closed, mask + [1 if message["role"] == "assistant" else 0] * len(added)
        return ids, mask

    def decode(self, ids: list[int]) -> str:
        """A turn's text without its stop token; other special tokens stay (`<tool_call>` is one in Qwen)."""
        return self.tokenizer.decode([t for t in ids if t not in self.stop_ids], skip_special_tokens=False)


def end_of_turn_id(tokenizer: Any) -> int:
    """The token that ends an assistant message: `<|im_end|>` for ChatML templates, else EOS."""
    token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id is not None:
        return token_id
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has neither <|im_end|> nor an EOS token to end a turn")
    return tokenizer.eos_token_id
