"""The episodes a run trains on: one reset per group (the given tasks in turn, or seeds of the split; prefix groups
when asked), played on the env servers by the vLLM server's sampler or the policy's own, and handed to the trainer as
its rollouts."""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_client.train.prepared_run import PreparedRun
from trainer_client.train.settings import TrainSettings
from trainer_client.train.trainer_config import local_groups
from trainer_client.train.training_policy import TrainingPolicy

if TYPE_CHECKING:
    from trainer_client.rollout.agent_loop import TurnSampler
    from trainer_client.rollout.rows import StreamedRollouts
    from trainer_client.rollout.token_log import TokenLog

logger = logging.getLogger(__name__)


def reset_options(settings: TrainSettings, rank: int = 0, world: int = 1) -> Iterator[dict[str, Any]]:
    """One reset per group: the given tasks in turn, or fresh seeds of the split. Under `accelerate launch` each of
    the `world` ranks takes every `world`th of them from its own `rank`, so no two ranks play the same group."""
    if settings.task_ids:
        tasks = itertools.cycle(settings.task_ids)
        return ({"task_id": task_id} for task_id in itertools.islice(tasks, rank, None, world))
    drawn = {"split": settings.split} | ({"sampler": "frontier"} if settings.sampler == "frontier" else {})
    return ({"seed": settings.seed * 1_000_003 + n, **drawn} for n in itertools.count(rank, world))


def training_run_id(output_dir: Path) -> str:
    """The id every rank of a run, and a resumed run, sends with its resets: the frontier sampler reads this run's
    pass rates alone. It names the run's output folder."""
    resolved = str(output_dir.resolve())
    return f"{output_dir.name}-{hashlib.sha256(resolved.encode()).hexdigest()[:8]}"


def run_reset_tags(settings: TrainSettings) -> dict[str, Any]:
    """What every reset of the run says: why and by whom it is played, and, for prefix sampling, to record each
    command's effect on the workspace (a prefix reset can take only the steps that changed no file)."""
    tags: dict[str, Any] = {"origin": "training", "run_id": training_run_id(settings.output_dir)}
    if settings.prefix_sampling:
        tags["track_effects"] = True
    return tags


def training_rollouts(run: PreparedRun, policy: TrainingPolicy) -> StreamedRollouts:
    """The trainer's rollout function: a stream of this rank's groups, which prefix sampling (when on) hears back."""
    from trainer_client.rollout.agent_loop import EpisodeLimits
    from trainer_client.rollout.prefix_planner import PrefixPlanner
    from trainer_client.rollout.rows import StreamedRollouts
    from trainer_client.rollout.stream import RolloutStream
    from trainer_client.rollout.stream_settings import StreamSettings

    settings = run.settings
    sampler = turn_sampler(settings, policy)
    limits = EpisodeLimits(
        max_turns=settings.max_turns,
        max_turn_tokens=settings.max_turn_tokens,
        max_completion_tokens=settings.max_completion_tokens,
    )
    options = reset_options(settings, run.rank, run.world)
    planner = PrefixPlanner(options, settings.prefix_fraction) if settings.prefix_sampling else None
    playing = StreamSettings(
        workers=settings.workers,
        group_size=settings.group_size,
        max_staleness=settings.max_staleness,
        max_buffered_groups=2 * local_groups(settings, run.world),
        drop_uniform=settings.drops_uniform_groups,
        uniform_patience=settings.uniform_patience,
        reset_tags=run_reset_tags(settings),
    )
    stream = RolloutStream(
        settings.env,
        sampler,
        policy.tokens,
        limits,
        planner or options,
        playing,
        settings.env_retries,
        _token_log(run, policy),
    )
    on_group = planner.observe if planner else None
    return StreamedRollouts(stream, policy.tokens, settings.episode_timeout_s, on_group=on_group)


def turn_sampler(settings: TrainSettings, policy: TrainingPolicy) -> TurnSampler:
    """What generates the policy's turns: the vLLM server the trainer pushes its weights to, or the policy itself."""
    from trainer_client.rollout.hf_sampler import HFTurnSampler
    from trainer_client.rollout.vllm_sampler import VLLMTurnSampler

    tokens = policy.tokens
    if settings.vllm_server:
        return VLLMTurnSampler.connect(settings.vllm_server, tokens.stop_ids, settings.temperature, settings.workers)
    return HFTurnSampler(
        policy.model,
        policy.tokenizer.pad_token_id,
        tokens.stop_ids,
        settings.temperature,
        max_batch=settings.workers,
        weights_lock=policy.weights_lock,
    )


def _token_log(run: PreparedRun, policy: TrainingPolicy) -> TokenLog | None:
    """Where each played episode's tokens go with --record-tokens: one file a rank, one writer a file."""
    from trainer_client.rollout.token_log import TokenLog

    settings = run.settings
    if not settings.record_tokens:
        return None
    name = "episode_tokens.jsonl" if run.world == 1 else f"episode_tokens.rank{run.rank}.jsonl"
    token_log = TokenLog(settings.output_dir / name, settings.model, policy.tokens)
    logger.info("episode tokens go to %s (regrow traces export --tokens %s)", token_log.path, token_log.path)
    return token_log
