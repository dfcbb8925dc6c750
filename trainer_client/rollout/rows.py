"""The bridge from streamed episodes to GRPOTrainer: its `rollout_func`, reward function and prompt rows.

GRPOTrainer asks for one trajectory per prompt row, with each prompt repeated `num_generations`
times; the rows here are placeholders, since the env picks the task, and each group of
`num_generations` rows is filled with one streamed group (the same task played that many times).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from trainer_client.rollout.agent_loop import Trajectory
from trainer_client.rollout.chat_tokens import EpisodeTokenizer
from trainer_client.rollout.stream import RolloutStream

EPISODE_SLOT = [{"role": "user", "content": "(an episode streamed from the env server)"}]


@dataclass(frozen=True)
class HintedTurn:
    """A turn the env gave feedback on; offsets index the row's completion ids."""

    hint_at: int  # where the hint goes: before the turn's generation prompt (negative: inside the prompt)
    start: int
    end: int
    hint_ids: tuple[int, ...]


class RolloutRow(TypedDict):
    """One episode as `rollout_func` hands it to GRPOTrainer, which merges the fields past its own (ids, logprobs,
    env mask) into the row its loss reads: their names are declared here once, and mypy holds every read to them."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    env_reward: float  # the env's reward; `env_reward` below reads it by this name
    sdpo_turns: list[HintedTurn]
    stop_reason: str
    policy_version: int | None  # the optimizer step whose weights sampled it
    stream_counters: NotRequired[dict[str, float]]  # the stream's running totals, logged as rollout/*


def rollout_columns(rows: list[RolloutRow]) -> dict[str, list]:
    """`rows` as rollout_func returns them: one list a field."""
    names = rows[0].keys() if rows else RolloutRow.__required_keys__
    return {name: [row.get(name) for row in rows] for name in names}


def episode_slots(count: int) -> Any:
    """A dataset of placeholder prompts; GRPOTrainer samples rows of it, the env chooses the tasks."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [EPISODE_SLOT] * count})


def hinted_turns(trajectory: Trajectory, tokens: EpisodeTokenizer) -> list[HintedTurn]:
    """The turns SDPO distills: those the env gave feedback on, each with the token ids of that feedback's hint."""
    return [
        HintedTurn(
            hint_at=turn.prompt_at, start=turn.start, end=turn.end, hint_ids=tuple(tokens.hint_ids(turn.feedback))
        )
        for turn in trajectory.hinted_turns
        if turn.feedback is not None  # what makes a turn hinted
    ]


def trajectory_row(trajectory: Trajectory, tokens: EpisodeTokenizer) -> RolloutRow:
    """One played episode's row: ids, logprobs and env mask, plus the fields the reward and SDPO read."""
    return RolloutRow(
        prompt_ids=trajectory.prompt_ids,
        completion_ids=trajectory.completion_ids,
        logprobs=trajectory.logprobs,
        env_mask=trajectory.env_mask,
        env_reward=trajectory.reward,
        sdpo_turns=hinted_turns(trajectory, tokens),
        stop_reason=trajectory.stop_reason,
        policy_version=trajectory.policy_version,
    )


def trajectory_rows(trajectories: list[Trajectory], tokens: EpisodeTokenizer) -> dict[str, list]:
    """rollout_func's output for `trajectories`: one list a field of their rows."""
    return rollout_columns([trajectory_row(t, tokens) for t in trajectories])


def env_reward(completions: list, env_reward: list[float], **kwargs: Any) -> list[float]:
    """The env's test reward of each episode (the fraction of FAIL_TO_PASS tests that pass)."""
    return [float(r) for r in env_reward]


def final_generation(trainer: Any) -> bool:
    """Whether the rollouts asked for now are the run's last: GRPOTrainer (TRL 1.16) generates at the micro-steps that
    are multiples of steps_per_generation x num_iterations, and stops after max_steps x gradient_accumulation_steps."""
    args = trainer.args
    accumulation = args.gradient_accumulation_steps
    # global_step, not TRL's _step alone: a resumed run restarts _step at 0
    micro_step = trainer.state.global_step * accumulation + getattr(trainer, "_step", 0) % accumulation
    return micro_step + args.steps_per_generation * args.num_iterations >= args.max_steps * accumulation


class StreamedRollouts:
    """GRPOTrainer's `rollout_func`: takes finished groups from the rollout stream.

    Each row also carries the stream's counters (`stream_counters`), which the trainer logs as `rollout/*`.
    """

    def __init__(
        self,
        stream: RolloutStream,
        tokens: EpisodeTokenizer,
        timeout_s: float = 1800.0,
        on_group: Callable[[list[Trajectory]], None] | None = None,
    ):
        self.stream = stream
        self.tokens = tokens
        self.timeout_s = timeout_s
        self.on_group = on_group  # hears each group the trainer takes (prefix sampling plans from them)

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
        self.stream.sampler.version = trainer.state.global_step  # episodes started from now on use these weights
        groups = self.stream.next_groups(
            len(prompts) // trainer.num_generations, trainer.state.global_step, self.timeout_s
        )
        if self.on_group is not None:
            for group in groups:
                self.on_group(group)
        if final_generation(trainer):  # the stream would play on through the last step's training, for nothing
            self.stream.stop_playing()
        counters = self.stream.stats.counters()
        rows = [trajectory_row(t, self.tokens) for group in groups for t in group]
        return rollout_columns([RolloutRow(**row, stream_counters=counters) for row in rows])
