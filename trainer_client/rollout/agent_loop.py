"""The agent loop: play one episode with the policy against the env and record it for training.

Each turn the policy generates from the whole token context; every tool call it wrote (a malformed
one too) is sent to the env; the responses are appended as env tokens. The recording keeps the
policy's tokens and logprobs, an env mask (1 policy, 0 env), each turn's span and the env's feedback on it.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from proto import CodingObservation, ToolCall, tool_specs
from proto.transcript import (
    ASSISTANT_TEXT_KEY,
    TURN_KEY,
    initial_messages,
    prefix_messages,
    tool_response_message,
    turn_feedback,
)
from trainer_client.env.client import Episode, EpisodeSource
from trainer_client.rollout.chat_format import ParsedToolCall, parse_tool_calls
from trainer_client.rollout.chat_tokens import EpisodeTokenizer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GeneratedTurn:
    """One turn sampled by the policy: its tokens, their logprobs, and whether it ended on a stop token."""

    ids: list[int]
    logprobs: list[float]
    finished: bool


class TurnSampler(Protocol):
    """Samples one turn from a token context; `version` counts the policy updates it has seen."""

    version: int

    async def generate(self, context_ids: list[int], max_new_tokens: int) -> GeneratedTurn: ...


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int = 16
    max_turn_tokens: int = 512
    max_completion_tokens: int = 4096  # all turns and env responses after the first prompt
    min_turn_tokens: int = 16  # stop when less room than this is left for a turn


@dataclass
class TurnRecord:
    """One policy turn; offsets index the trajectory's completion ids."""

    start: int
    end: int
    text: str
    calls: int
    parse_errors: list[str]
    feedback: str | None  # what the env said about this turn's calls: SDPO's hint for this same turn
    prompt_at: int  # where this turn's generation prompt starts, the hint's place (negative: in the first prompt)


@dataclass
class Trajectory:
    """One played episode as one training row."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    stop_reason: str = "turn_limit"
    policy_version: int = 0
    reset_options: dict[str, Any] = field(default_factory=dict)
    final_metadata: dict[str, Any] = field(default_factory=dict)
    episode_id: str | None = None  # the env's id of the episode (its reset metadata), to join its trace
    task_id: str | None = None  # the task the reset gave, as the env names it

    def append(self, ids: list[int], logprobs: list[float] | None, from_policy: bool) -> None:
        self.completion_ids.extend(ids)
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.env_mask.extend([1 if from_policy else 0] * len(ids))

    @property
    def hinted_turns(self) -> list[TurnRecord]:
        return [turn for turn in self.turns if turn.feedback is not None and turn.end > turn.start]


async def play_episode(
    env: EpisodeSource,
    sampler: TurnSampler,
    tokens: EpisodeTokenizer,
    limits: EpisodeLimits,
    reset_options: dict[str, Any],
    on_reset: Callable[[str | None], None] | None = None,
    on_turn: Callable[[GeneratedTurn], None] | None = None,
) -> Trajectory:
    """Play one episode to done, the turn limit or the token budget, and return its recording; `on_reset` hears the
    id of the task the reset drew, before the first turn, and `on_turn` each turn as the policy has written it."""
    async with env.episode(**reset_options) as episode:
        first = episode.first
        if on_reset is not None:
            on_reset(first.metadata.get("task_id"))
        messages = initial_messages(first.problem_statement or "", first.tools or tool_specs())
        messages += prefix_messages(first.metadata.get("prefix"))  # a prefix reset's recorded steps, as context
        trajectory = Trajectory(
            prompt_ids=tokens.prompt_ids(messages),
            policy_version=sampler.version,
            reset_options=dict(reset_options),
            episode_id=first.metadata.get("episode_id"),
            task_id=first.metadata.get("task_id"),
        )
        prompt_at = -len(tokens.first_generation_prompt(messages))
        for turn_index in range(limits.max_turns):
            room = limits.max_completion_tokens - len(trajectory.completion_ids)
            if room < limits.min_turn_tokens:
                trajectory.stop_reason = "token_budget"
                break
            context = trajectory.prompt_ids + trajectory.completion_ids
            generated = await sampler.generate(context, min(room, limits.max_turn_tokens))
            if on_turn is not None:
                on_turn(generated)
            start = len(trajectory.completion_ids)
            trajectory.append(generated.ids, generated.logprobs, from_policy=True)
            text = tokens.decode(generated.ids)
            sent = await _send_calls(episode, text, turn_index)
            observations = [observation for _, observation in sent]
            trajectory.turns.append(
                TurnRecord(
                    start=start,
                    end=len(trajectory.completion_ids),
                    text=text,
                    calls=len(observations),
                    parse_errors=[parsed.error for parsed, _ in sent if parsed.error],
                    feedback=turn_feedback(observations),
                    prompt_at=prompt_at,
                )
            )
            if episode.done:
                final = observations[-1]
                trajectory.done, trajectory.stop_reason = True, "done"
                trajectory.reward = float(final.reward or 0.0)
                trajectory.final_metadata = final.metadata
                break
            segment = tokens.env_segment(tool_response_message(observations))
            closing = [] if generated.finished else [tokens.end_of_turn_id]  # close a turn cut at its token cap
            needed = len(closing) + len(segment.response_ids) + len(segment.generation_prompt_ids)
            if len(trajectory.completion_ids) + needed + limits.min_turn_tokens > limits.max_completion_tokens:
                trajectory.stop_reason = "token_budget"
                break
            trajectory.append(closing + segment.response_ids, None, from_policy=False)
            prompt_at = len(trajectory.completion_ids)
            trajectory.append(segment.generation_prompt_ids, None, from_policy=False)
        if not trajectory.done:
            await _grade_as_it_stands(episode, trajectory)
        logger.debug(
            "episode %s: %d turns, stop=%s, reward=%.3f",
            reset_options,
            len(trajectory.turns),
            trajectory.stop_reason,
            trajectory.reward,
        )
        return trajectory


async def _grade_as_it_stands(episode: Episode, trajectory: Trajectory) -> None:
    """Submit an episode the turn limit or the token budget cut off, so that its workspace is graded as TRL's path
    grades one (trl_environment.get_reward) and its sandbox is freed; the trajectory stays not done, its tokens as
    the policy left them."""
    final = await episode.step(ToolCall(tool="submit", args={}, metadata={TURN_KEY: len(trajectory.turns)}))
    trajectory.reward = float(final.reward or 0.0)
    trajectory.final_metadata = final.metadata


async def _send_calls(episode: Episode, text: str, turn_index: int) -> list[tuple[ParsedToolCall, CodingObservation]]:
    """Step the env with every call in the turn's text, in order, until one ends the episode."""
    sent = []
    for call_index, parsed in enumerate(parse_tool_calls(text)):
        metadata = {**parsed.call.metadata, TURN_KEY: turn_index}
        if call_index == 0:
            metadata[ASSISTANT_TEXT_KEY] = text
        observation = await episode.step(parsed.call.model_copy(update={"metadata": metadata}))
        sent.append((parsed, observation))
        if observation.done:
            break
    return sent
