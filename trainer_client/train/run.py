"""One training run: load the policy, stream episodes from the env, and train with the three channels."""

import contextlib
import hashlib
import itertools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_client.train.settings import TrainSettings

if TYPE_CHECKING:  # grpo_trainer loads torch and TRL; this module imports them only when a run starts
    from trainer_client.channels.preference_pairs import PreferencePair
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig
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


def process_rank() -> tuple[int, int]:
    """(rank, world size) as `accelerate launch` or torchrun set them; (0, 1) for a process alone."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def resolve_device(choice: str) -> str:
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda, but torch sees no CUDA device; use --device cpu or auto")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


def check_sharding(settings: TrainSettings, sharding: str) -> None:
    """Refuse, before the model loads, what would hang or corrupt a run whose weights FSDP or ZeRO-3 shard: every
    forward of a sharded model is a collective, so every rank must run the same ones, and a sharded parameter is not
    the whole weight."""
    if sharding == "none":
        return
    problems = []
    if not settings.vllm_server:
        problems.append(
            "the in-process sampler generates a different number of tokens on each rank from the sharded model; "
            "serve the policy with `trl vllm-serve` and pass --vllm-server URL"
        )
    if settings.alpha_sdpo and (settings.sdpo_teacher == "ema" or not settings.lora_r):
        problems.append(
            f"--sdpo-teacher {settings.sdpo_teacher} keeps or updates a teacher from sharded weights as if they were "
            "whole; use --sdpo-teacher live, or --lora-r (its initial teacher is the adapter switched off)"
        )
    if settings.alpha_sdpo or settings.beta_dpo:
        problems.append(
            "the SDPO teacher's and the DPO pairs' forwards differ in number between ranks (their chunks are not yet "
            "padded to a count the ranks agree on); run --alpha-sdpo or --beta-dpo under DDP "
            "(deploy/accelerate/ddp.yaml)"
        )
    if problems:
        listed = "".join(f"\n  - {problem}" for problem in problems)
        raise ValueError(f"under {sharding} sharding this run would hang or train on wrong weights:{listed}")


def rank_device(device: str) -> str:
    """Where this process's model lives: under a launcher, CUDA rank LOCAL_RANK's own card, made current before
    anything allocates on CUDA; else `device` itself. Without it every rank loaded its copy onto GPU 0."""
    if device != "cuda":
        return device
    import torch

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local >= torch.cuda.device_count():
        raise RuntimeError(
            f"LOCAL_RANK {local}, but torch sees {torch.cuda.device_count()} CUDA device(s): start at most that many "
            "processes on this host (accelerate launch --num_processes), or set CUDA_VISIBLE_DEVICES"
        )
    torch.cuda.set_device(local)
    return f"cuda:{local}"


def curves_dir(output_dir: Path) -> Path:
    """Where a run's TensorBoard event files go: one folder a run directory, the same after a resume."""
    return output_dir / "tensorboard"


def last_checkpoint(output_dir: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None


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
    from trainer_client.rollout.vllm_sampler import server_mode_config
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


def check_memory(settings: TrainSettings, device: str, host_gib: tuple[float, float] | None = None) -> int | None:
    """Refuse, before the model loads, a run whose planned memory exceeds this GPU's, naming the remedy; else the
    rows a forward takes at once (--micro-batch-rows, or the most that fit when it is not given). On a CPU the plan
    (an upper bound: every row at --max-completion-tokens) is held against the host's RAM, shared by the processes
    launched on it: past all of it the run is refused, past what is free now it is warned of."""
    from trainer_client.train.memory_plan import (
        GIB,
        fitted_plan,
        host_memory_gib,
        launched_sharding,
        run_shape,
        shape_of,
    )

    try:
        shape = shape_of(settings.model)
    except FileNotFoundError:
        return None  # a GGUF file: its shape is in the weights; the load itself will say what is wrong
    gpus, sharding = process_rank()[1], launched_sharding()
    if device == "cuda":
        capacity, available, held = _device_gib(), None, "each GPU"
    else:
        total, free = host_gib or host_memory_gib()
        capacity, available, held = total / local_processes(), free / local_processes(), "this host, per process"
    plan = fitted_plan(shape, run_shape(settings, gpus, sharding, device), capacity)
    logger.info("memory plan:\n%s", "\n".join(plan.lines()))
    needed = plan.total_bytes / GIB
    if not plan.fits:
        raise RuntimeError(
            f"this run needs up to {needed:.0f} GiB on {held} and there are {capacity:.0f} GiB: try {plan.remedy()} "
            "(`regrow train --plan` shows the parts; --no-memory-check runs it anyway)"
        )
    if available is not None and needed > available:
        logger.warning(
            "this run may need up to %.0f GiB on %s and %.0f GiB are free now: the kernel may kill it mid-step; "
            "if it does, try %s",
            needed,
            held,
            available,
            plan.remedy(),
        )
    return plan.run.forward_rows


def _device_gib() -> float:
    import torch

    from trainer_client.train.memory_plan import GIB

    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / GIB


def local_processes() -> int:
    """The training processes `accelerate launch` or torchrun started on this host (1 without a launcher)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def save_final(trainer: Any, tokenizer: Any, final: Path, sharded: bool = False) -> None:
    """The trained policy as a whole model any loader reads (a LoRA adapter merged in; the adapter alone beside it,
    in final/adapter). Under sharding only the adapter is saved: a merge would read each rank's shard as the whole
    weight."""
    from trainer_client.policy.lora_adapter import is_adapted

    model = trainer.accelerator.unwrap_model(trainer.model)
    if not is_adapted(model):
        trainer.save_model(str(final))
    else:
        trainer.save_model(str(final / "adapter"))  # peft's own folder: the adapter alone
        if sharded:
            logger.warning(
                "saved the LoRA adapter alone in %s: merge it into the base model in one process "
                "(peft's PeftModel.from_pretrained(base, adapter).merge_and_unload())",
                final / "adapter",
            )
        elif trainer.accelerator.is_main_process:
            model.merge_and_unload().save_pretrained(str(final))
    tokenizer.save_pretrained(str(final))


def read_dpo_pairs(settings: TrainSettings, world: int) -> "list[PreferencePair]":
    """The DPO channel's pairs, read before the policy loads (their reference dtype is the one it loads in); none
    without --beta-dpo."""
    from trainer_client.channels.preference_pairs import read_pairs

    if not settings.beta_dpo:
        return []
    if settings.dpo_pairs_per_step < world:
        raise ValueError(
            f"--dpo-pairs-per-step {settings.dpo_pairs_per_step} gives some of the {world} processes no pair: "
            f"give at least {world}"
        )
    if settings.pairs is None:
        raise ValueError("--beta-dpo needs --pairs pairs.jsonl (from `regrow replay`)")
    return read_pairs(settings.pairs)


def run_training(
    settings: TrainSettings, show_progress: "Callable[[RolloutProgress], None] | None" = None
) -> TrainSummary:
    """Train for `settings.steps` optimizer steps; resumes from the last checkpoint when asked."""
    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.channels.reference_policy import check_reference_policy, rescored_at, training_precision
    from trainer_client.policy.policy_loading import load_policy
    from trainer_client.rollout.agent_loop import EpisodeLimits, TurnSampler
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer
    from trainer_client.rollout.hf_sampler import HFTurnSampler
    from trainer_client.rollout.prefix_planner import PrefixPlanner
    from trainer_client.rollout.rows import StreamedRollouts, env_reward, episode_slots
    from trainer_client.rollout.stream import RolloutStream
    from trainer_client.rollout.stream_settings import StreamSettings
    from trainer_client.rollout.token_log import TokenLog
    from trainer_client.rollout.vllm_sampler import VLLMTurnSampler, check_vllm_ready
    from trainer_client.train.grpo_trainer import RegrowGRPOTrainer
    from trainer_client.train.memory_plan import launched_sharding

    rank, world = process_rank()
    local_groups(settings, world)  # said before the model loads
    check_sharding(settings, launched_sharding())
    device = resolve_device(settings.device)
    placement = rank_device(device)  # before the memory check reads the current device's size
    pairs = read_dpo_pairs(settings, world)
    pairs_dtypes = sorted({pair.reference_dtype for pair in pairs})
    dtype = settings.weights_dtype_on(device, pairs_dtypes[0] if len(pairs_dtypes) == 1 else None)
    settings = settings.model_copy(update={"weights_dtype": dtype})  # the plan and the load read the same dtype
    if settings.memory_check:
        rows_at_once = check_memory(settings, device)
        if settings.micro_batch_rows is None and rows_at_once is not None:  # the most rows at once that fit
            settings = settings.model_copy(update={"micro_batch_rows": rows_at_once})
    if settings.vllm_server:
        check_vllm_ready(settings.vllm_server, device, settings.vllm_timeout_s)  # before the slow model load
    model, tokenizer = load_policy(settings.model, placement, settings.weights_dtype)
    if settings.gradient_checkpointing and not settings.vllm_server:  # the sampler generates from this model
        from trainer_client.policy.grad_checkpointing import checkpoint_only_while_recording

        checkpoint_only_while_recording(model)
    tokens = EpisodeTokenizer(tokenizer)
    pair_batches = None
    if settings.beta_dpo:
        assert settings.pairs is not None  # read_dpo_pairs refused a run without them
        check_reference_policy(pairs, model, settings.model, str(settings.pairs))
        precision = training_precision(device, settings.bf16)
        stale = sum(pair.reference_precision != precision for pair in pairs)
        if stale:
            logger.info(
                "scoring the reference of %d pair(s) again at %s, the precision training uses", stale, precision
            )
            pairs = rescored_at(pairs, model, tokenizer, precision)
        pair_batches = PairBatches(
            pairs,
            settings.dpo_pairs_per_step,
            seed=settings.seed,
            rank=rank,
            world=world,
            micro_batches=accumulation_steps(settings, world),
        )
    if settings.lora_r:  # after the reference check, which hashes the weights as `regrow replay` loaded them
        from trainer_client.policy.lora_adapter import with_lora

        if settings.lora_rate_by_default:
            logger.info(
                "LoRA r=%d: learning rate %g, the LoRA default (give --learning-rate to choose another)",
                settings.lora_r,
                settings.learning_rate,
            )

        model = with_lora(
            model, settings.lora_r, settings.lora_alpha, settings.lora_dropout, settings.lora_target_modules
        )
    sampler: TurnSampler
    weights_lock = threading.Lock()  # the sampler's forwards and the teacher's adapter swaps, one at a time
    if settings.vllm_server:
        sampler = VLLMTurnSampler.connect(settings.vllm_server, tokens.stop_ids, settings.temperature, settings.workers)
    else:
        sampler = HFTurnSampler(
            model,
            tokenizer.pad_token_id,
            tokens.stop_ids,
            settings.temperature,
            max_batch=settings.workers,
            weights_lock=weights_lock,
        )
    limits = EpisodeLimits(
        max_turns=settings.max_turns,
        max_turn_tokens=settings.max_turn_tokens,
        max_completion_tokens=settings.max_completion_tokens,
    )
    token_log: TokenLog | None = None
    if settings.record_tokens:
        name = "episode_tokens.jsonl" if world == 1 else f"episode_tokens.rank{rank}.jsonl"  # one writer a file
        token_log = TokenLog(settings.output_dir / name, settings.model, tokens)
        logger.info("episode tokens go to %s (regrow traces export --tokens %s)", token_log.path, token_log.path)
    options = reset_options(settings, rank, world)
    planner = PrefixPlanner(options, settings.prefix_fraction) if settings.prefix_sampling else None
    playing = StreamSettings(
        workers=settings.workers,
        group_size=settings.group_size,
        max_staleness=settings.max_staleness,
        max_buffered_groups=2 * local_groups(settings, world),
        drop_uniform=settings.drops_uniform_groups,
        uniform_patience=settings.uniform_patience,
        reset_tags={"origin": "training", "run_id": training_run_id(settings.output_dir)},
    )
    stream = RolloutStream(
        settings.env, sampler, tokens, limits, planner or options, playing, settings.env_retries, token_log
    )
    trainer = RegrowGRPOTrainer(
        model=model,
        args=build_config(settings, device, world),
        reward_funcs=env_reward,
        train_dataset=episode_slots(settings.groups_per_step),
        processing_class=tokenizer,
        rollout_func=StreamedRollouts(
            stream, tokens, settings.episode_timeout_s, on_group=planner.observe if planner else None
        ),
        pair_batches=pair_batches,
        weights_lock=weights_lock,
    )
    curves = curves_dir(settings.output_dir) if settings.logger == "tensorboard" else None
    if curves is not None:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        trainer.add_callback(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(curves))))
        logger.info("training curves go to %s (tensorboard --logdir %s)", curves, curves)
    resume_from = last_checkpoint(settings.output_dir) if settings.resume else None
    if resume_from:
        logger.info("resuming from %s", resume_from)
    watch: contextlib.AbstractContextManager = contextlib.nullcontext()
    if show_progress is not None:
        from transformers.trainer_callback import ProgressCallback

        from trainer_client.train.progress import ProgressWatch, rollout_progress

        # The step bar stays at 0/N for the minutes it takes to collect a step's episodes: show those instead.
        trainer.remove_callback(ProgressCallback)
        per_step = local_groups(settings, world) * settings.group_size  # this rank's share
        watch = ProgressWatch(
            lambda: rollout_progress(stream.stats, trainer.state.global_step, settings.steps, per_step), show_progress
        )
    with stream, watch:
        trainer.train(resume_from_checkpoint=resume_from)
    final = settings.output_dir / "final"
    save_final(trainer, tokenizer, final, sharded=launched_sharding() != "none")
    return TrainSummary(
        steps=trainer.state.global_step,
        episodes=stream.stats.episodes,
        groups_dropped_stale=stream.stats.groups_dropped_stale,
        episode_retries=stream.stats.episode_retries,
        groups_dropped_lost=stream.stats.groups_dropped_lost,
        groups_dropped_uniform=stream.stats.groups_dropped_uniform,
        policy_tokens=stream.stats.policy_tokens,
        final_model=final,
        curves=curves,
        log_history=[entry for entry in trainer.state.log_history if "loss" in entry],
    )
