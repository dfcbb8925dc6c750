"""One training run, as the recipe reads: check it and load the policy, stream episodes from the env, build the
trainer with the three channels, and train."""

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_client.train.memory_plan import launched_sharding
from trainer_client.train.prepared_run import PreparedRun, prepare_run
from trainer_client.train.settings import TrainSettings
from trainer_client.train.trainer_config import build_config, local_groups
from trainer_client.train.training_policy import TrainingPolicy, load_training_policy, save_final
from trainer_client.train.training_stream import training_rollouts

if TYPE_CHECKING:  # grpo_trainer loads torch and TRL; this module imports them only when a run starts
    from trainer_client.rollout.rows import StreamedRollouts
    from trainer_client.rollout.stream import StreamStats
    from trainer_client.train.grpo_trainer import RegrowGRPOTrainer
    from trainer_client.train.progress import RolloutProgress

logger = logging.getLogger(__name__)


@dataclass
class TrainSummary:
    """What a finished run reports."""

    steps: int
    episodes: int
    groups_dropped_stale: int
    episode_retries: int
    groups_dropped_lost: int
    groups_dropped_uniform: int
    policy_tokens: int
    final_model: Path
    log_history: list[dict[str, float]]
    curves: Path | None = None

    @property
    def distilled_tokens(self) -> float:
        return sum(entry.get("sdpo/distilled_tokens", 0.0) for entry in self.log_history)

    @classmethod
    def of(cls, trainer: Any, stats: "StreamStats", final: Path, curves: Path | None) -> "TrainSummary":
        """The summary of a finished `trainer`, whose episodes the stream counted in `stats`."""
        return cls(
            steps=trainer.state.global_step,
            episodes=stats.episodes,
            groups_dropped_stale=stats.groups_dropped_stale,
            episode_retries=stats.episode_retries,
            groups_dropped_lost=stats.groups_dropped_lost,
            groups_dropped_uniform=stats.groups_dropped_uniform,
            policy_tokens=stats.policy_tokens,
            final_model=final,
            curves=curves,
            log_history=[entry for entry in trainer.state.log_history if "loss" in entry],
        )


def run_training(
    settings: TrainSettings, show_progress: "Callable[[RolloutProgress], None] | None" = None
) -> TrainSummary:
    """Train for `settings.steps` optimizer steps; resumes from the last checkpoint when asked."""
    run = prepare_run(settings)  # what the run cannot do is refused before the slow load
    policy = load_training_policy(run)
    rollouts = training_rollouts(run, policy)
    trainer = build_trainer(run, policy, rollouts)
    curves = add_curves(trainer, run.settings)
    resume_from = resume_point(run.settings)
    with rollouts.stream, progress_watch(trainer, run, rollouts, show_progress):
        trainer.train(resume_from_checkpoint=resume_from)
    final = run.settings.output_dir / "final"
    save_final(trainer, policy.tokenizer, final, sharded=launched_sharding() != "none")
    return TrainSummary.of(trainer, rollouts.stream.stats, final, curves)


def build_trainer(run: PreparedRun, policy: TrainingPolicy, rollouts: "StreamedRollouts") -> "RegrowGRPOTrainer":
    """TRL's GRPO trainer with regrow's channels, training `policy` on the groups `rollouts` takes from the stream."""
    from trainer_client.rollout.rows import env_reward, episode_slots
    from trainer_client.train.grpo_trainer import RegrowGRPOTrainer

    return RegrowGRPOTrainer(
        model=policy.model,
        args=build_config(run.settings, run.device, run.world),
        reward_funcs=env_reward,
        train_dataset=episode_slots(run.settings.groups_per_step),
        processing_class=policy.tokenizer,
        rollout_func=rollouts,
        pair_batches=policy.pair_batches,
        weights_lock=policy.weights_lock,
    )


def add_curves(trainer: Any, settings: TrainSettings) -> Path | None:
    """Where the run's TensorBoard curves go (None under another --logger), once the trainer writes them there."""
    curves = curves_dir(settings.output_dir) if settings.logger == "tensorboard" else None
    if curves is not None:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        trainer.add_callback(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(curves))))
        logger.info("training curves go to %s (tensorboard --logdir %s)", curves, curves)
    return curves


def resume_point(settings: TrainSettings) -> str | None:
    """The checkpoint the run goes on from: the last one in its output folder with --resume, else none."""
    resume_from = last_checkpoint(settings.output_dir) if settings.resume else None
    if resume_from:
        logger.info("resuming from %s", resume_from)
    return resume_from


def progress_watch(
    trainer: Any,
    run: PreparedRun,
    rollouts: "StreamedRollouts",
    show_progress: "Callable[[RolloutProgress], None] | None",
) -> contextlib.AbstractContextManager:
    """While training, hand `show_progress` this rank's rollouts toward the next step, in place of the step bar."""
    if show_progress is None:
        return contextlib.nullcontext()
    from transformers.trainer_callback import ProgressCallback

    from trainer_client.train.progress import ProgressWatch, rollout_progress

    # The step bar stays at 0/N for the minutes it takes to collect a step's episodes: show those instead.
    trainer.remove_callback(ProgressCallback)
    settings, stats = run.settings, rollouts.stream.stats
    per_step = local_groups(settings, run.world) * settings.group_size  # this rank's share
    return ProgressWatch(
        lambda: rollout_progress(stats, trainer.state.global_step, settings.steps, per_step), show_progress
    )


def curves_dir(output_dir: Path) -> Path:
    """Where a run's TensorBoard event files go: one folder a run directory, the same after a resume."""
    return output_dir / "tensorboard"


def last_checkpoint(output_dir: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
