"""The policy a run trains: loaded once onto this process's device (under FSDP, read by rank 0 alone), with the DPO
pairs checked against it (and scored again where their precision is not training's), a LoRA adapter when asked, and
saved whole at the end."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_client.train.prepared_run import PreparedRun
from trainer_client.train.settings import TrainSettings
from trainer_client.train.trainer_config import accumulation_steps

if TYPE_CHECKING:
    from trainer_client.channels.preference_pairs import PairBatches, PreferencePair
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer

logger = logging.getLogger(__name__)


@dataclass
class TrainingPolicy:
    """The model and its tokenizer, its episode tokens, the DPO pairs in per-step batches (None without --beta-dpo),
    and the lock that takes the sampler's forwards and the SDPO teacher's adapter swaps one at a time."""

    model: Any
    tokenizer: Any
    tokens: EpisodeTokenizer
    pair_batches: PairBatches | None
    weights_lock: threading.Lock = field(default_factory=threading.Lock)


def load_training_policy(run: PreparedRun) -> TrainingPolicy:
    """Load the policy where `run` places it; the DPO pairs are checked against the weights as loaded, before LoRA.
    Under FSDP only rank 0's model holds the weights until the trainer's prepare: what follows works on the others'
    empty ones (the checkpointing flags and LoRA do not read weights; the pairs' check runs on rank 0)."""
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer
    from trainer_client.train.sharded_loading import load_rank_policy

    settings = run.settings
    model, tokenizer = load_rank_policy(run)
    if settings.gradient_checkpointing and not settings.vllm_server:  # the sampler generates from this model
        from trainer_client.policy.grad_checkpointing import checkpoint_only_while_recording

        checkpoint_only_while_recording(model)
    pair_batches = dpo_pair_batches(run, model, tokenizer) if settings.beta_dpo else None
    if settings.lora_r:  # after the reference check, which hashes the weights as `regrow replay` loaded them
        model = _with_lora(model, settings)
    return TrainingPolicy(model, tokenizer, EpisodeTokenizer(tokenizer), pair_batches)


def dpo_pair_batches(run: PreparedRun, model: Any, tokenizer: Any) -> PairBatches:
    """The run's DPO pairs, checked to have been scored by this policy, in batches of --dpo-pairs-per-step for this
    rank and its micro-batches. Where rank 0 alone holds the weights, it checks, and every rank gets its pairs or its
    error."""
    from trainer_client.channels.preference_pairs import PairBatches
    from trainer_client.train.sharded_loading import rank_zero_reads_weights, rank_zero_result

    settings = run.settings
    if rank_zero_reads_weights(run.world):
        pairs = rank_zero_result(lambda: reference_checked_pairs(run, model, tokenizer), run.rank)
    else:
        pairs = reference_checked_pairs(run, model, tokenizer)
    return PairBatches(
        pairs,
        settings.dpo_pairs_per_step,
        seed=settings.seed,
        rank=run.rank,
        world=run.world,
        micro_batches=accumulation_steps(settings, run.world),
    )


def reference_checked_pairs(run: PreparedRun, model: Any, tokenizer: Any) -> list[PreferencePair]:
    """The run's pairs once checked to have been scored by `model` as loaded, those scored at another precision than
    training's scored again (on the run's device: under FSDP, rank 0's weights wait on the CPU)."""
    from trainer_client.channels.reference_policy import check_reference_policy, rescored_at, training_precision

    settings, pairs = run.settings, run.pairs
    assert settings.pairs is not None  # read_dpo_pairs refused a run without them
    check_reference_policy(pairs, model, settings.model, str(settings.pairs))
    precision = training_precision(run.device, settings.bf16)
    stale = sum(pair.reference_precision != precision for pair in pairs)
    if stale:
        logger.info("scoring the reference of %d pair(s) again at %s, the precision training uses", stale, precision)
        with _placed_on(model, run.placement):
            pairs = rescored_at(pairs, model, tokenizer, precision)
    return pairs


@contextlib.contextmanager
def _placed_on(model: Any, device: str) -> Iterator[None]:
    """`model` on `device` for the duration, then back where it was."""
    home = next(model.parameters()).device
    model.to(device)
    try:
        yield
    finally:
        model.to(home)


def _with_lora(model: Any, settings: TrainSettings) -> Any:
    from trainer_client.policy.lora_adapter import with_lora

    if settings.lora_rate_by_default:
        logger.info(
            "LoRA r=%d: learning rate %g, the LoRA default (give --learning-rate to choose another)",
            settings.lora_r,
            settings.learning_rate,
        )
    return with_lora(model, settings.lora_r, settings.lora_alpha, settings.lora_dropout, settings.lora_target_modules)


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
