"""The trainer's config from a run's settings: how a step's groups split over the ranks and, within a rank, into
micro-batches with gradient accumulation."""

from typing import TYPE_CHECKING

from trainer_client.train.settings import TrainSettings

if TYPE_CHECKING:  # grpo_trainer loads torch and TRL; this module imports them only when a run starts
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig


def local_groups(settings: TrainSettings, world: int) -> int:
    """The groups of a step that one of `world` ranks plays and trains: --groups-per-step counts the whole step."""
    if settings.groups_per_step % world:
        raise ValueError(
            f"--groups-per-step {settings.groups_per_step} does not split over {world} processes: give a multiple "
            f"of {world}, so that each rank trains the same number of groups"
        )
    return settings.groups_per_step // world


def accumulation_steps(settings: TrainSettings, world: int) -> int:
    """How many micro-batches of --micro-batch-rows make a rank's share of a step (1 without micro-batches)."""
    rows = settings.group_size * local_groups(settings, world)
    micro = settings.micro_batch_rows or rows
    if rows % micro:
        raise ValueError(
            f"--micro-batch-rows {micro} does not divide a rank's {rows} rows a step (--group-size x --groups-per-step "
            f"/ processes): give a divisor of {rows}"
        )
    steps = rows // micro
    if settings.beta_dpo and settings.dpo_pairs_per_step < world * steps:
        raise ValueError(
            f"--dpo-pairs-per-step {settings.dpo_pairs_per_step} leaves some of the {world * steps} micro-batches "
            f"({world} processes x {steps}) without a pair: give at least {world * steps}"
        )
    return steps


def build_config(settings: TrainSettings, device: str, world: int = 1) -> "RegrowGRPOConfig":
    from trainer_client.rollout.vllm_server import server_mode_config
    from trainer_client.train.grpo_trainer import CHANNEL_SETTINGS, RegrowGRPOConfig

    vllm = server_mode_config(settings.vllm_server, settings.vllm_timeout_s) if settings.vllm_server else {}
    accumulation = accumulation_steps(settings, world)
    return RegrowGRPOConfig(
        output_dir=str(settings.output_dir),
        per_device_train_batch_size=settings.group_size * local_groups(settings, world) // accumulation,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation,  # a generation batch is the whole step: GRPO's groups stay whole
        num_generations=settings.group_size,
        max_completion_length=settings.max_completion_tokens,
        max_steps=settings.steps,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_schedule,
        temperature=settings.temperature,
        loss_type=settings.loss_type,
        **settings.model_dump(include=set(CHANNEL_SETTINGS)),
        report_to=[],  # TensorBoard is added by run_training, in a folder named before training starts
        logging_steps=1,
        save_steps=settings.save_steps,
        use_cpu=device == "cpu",
        bf16=device == "cuda" and settings.bf16,
        gradient_checkpointing=settings.gradient_checkpointing,
        seed=settings.seed,
        **vllm,
    )
