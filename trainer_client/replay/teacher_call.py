"""One teacher call: the reply every teacher answers with, how a call fails, and what a call costs."""

from dataclasses import dataclass
from typing import Any

from trainer_client.replay.teachers_config import TeacherConfig

# A message's template overhead (role markers, separators) in tokens, for the worst-case estimate.
_TOKENS_PER_MESSAGE = 8


@dataclass(frozen=True)
class TeacherReply:
    """One successful answer: the assistant text and what it took."""

    text: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float
    attempts: int


class TeacherError(RuntimeError):
    """A teacher gave no usable answer; `kind` is what the report counts (timeout, http_503, ...)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def call_cost_usd(config: TeacherConfig, input_tokens: int, output_tokens: int) -> float:
    """Price of one call from its token counts."""
    return (input_tokens * config.input_usd_per_mtok + output_tokens * config.output_usd_per_mtok) / 1e6


def worst_case_tokens(config: TeacherConfig, messages: list[dict[str, Any]]) -> tuple[int, int]:
    """Bounds on one call's input and output tokens: a token is at least one byte, the reply at most max_tokens."""
    input_bound = sum(len(str(m.get("content", "")).encode()) + _TOKENS_PER_MESSAGE for m in messages)
    return input_bound, config.max_tokens


def worst_case_cost_usd(config: TeacherConfig, messages: list[dict[str, Any]]) -> float:
    """An upper bound on one answered call.

    Failed attempts (timeouts, 5xx) return no usage and are not billed by the APIs we target.
    """
    return call_cost_usd(config, *worst_case_tokens(config, messages))
