"""Under FSDP, the host holds one copy of the policy's weights: rank 0 alone reads them, the other ranks build the
model around empty memory, and accelerate's FSDP2 prepare hands every rank its shard of rank 0's weights.

What rank 0 alone can compute from the weights (the DPO pairs' reference check) it computes once, and every rank
gets its answer, or its error, so that a bad input fails every rank with the same message and none waits forever.

What this relies on (accelerate 1.15): `Accelerator.prepare` runs `utils.fsdp_utils.fsdp2_prepare_model`, which,
when the FSDP plugin's `cpu_ram_efficient_loading` is set (FSDP_CPU_RAM_EFFICIENT_LOADING, which `accelerate launch`
sets from fsdp.yaml), moves every rank's model to meta, shards it, and calls `fsdp2_load_full_state_dict`: there
rank 0 (`accelerator.is_main_process`) broadcasts each tensor of its full state dict (`dist.broadcast(src=0)`) and
every rank keeps its shard. Non-persistent buffers are not broadcast: each rank's own are put back. Before that,
under mixed precision, the prepare upcasts every trainable weight that is not float32 on every rank, which writes a
float32 copy on each rank, empty ones too: only float32 weights (or a LoRA run's frozen ones) keep one host copy.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from trainer_client.train.prepared_run import PreparedRun

logger = logging.getLogger(__name__)

T = TypeVar("T")
# TrainingArguments' ddp_timeout default: its own setting cannot reach a process group started before it.
PROCESS_GROUP_TIMEOUT = timedelta(minutes=30)


def rank_zero_reads_weights(world: int) -> bool:
    """Whether this launch has rank 0 alone read the weights: FSDP with cpu-RAM-efficient loading over several
    processes. Alone, under DDP or without that setting, every process loads its own copy."""
    return world > 1 and _flag("ACCELERATE_USE_FSDP") and _flag("FSDP_CPU_RAM_EFFICIENT_LOADING")


def load_rank_policy(run: PreparedRun) -> tuple[Any, Any]:
    """(model, tokenizer) for this process: loaded onto its device, or under FSDP with one host copy, rank 0's read
    into CPU memory (the prepare moves each weight to the GPU as it broadcasts it) and the others' left empty."""
    from trainer_client.policy.policy_loading import empty_policy, load_policy

    settings = run.settings
    if not rank_zero_reads_weights(run.world):
        return load_policy(settings.model, run.placement, settings.weights_dtype)
    start_process_group(run.device)
    if run.rank == 0:
        return load_policy(settings.model, "cpu", settings.weights_dtype)
    logger.info("rank %d builds the policy without its weights; FSDP's prepare gives it rank 0's", run.rank)
    return empty_policy(settings.model, settings.weights_dtype)


def start_process_group(device: str) -> None:
    """Start the launch's process group now, as the trainer's TrainingArguments would later (gloo on the CPU, nccl
    on CUDA: accelerate's PartialState chooses); theirs then finds it started."""
    from accelerate import PartialState

    PartialState(cpu=device == "cpu", timeout=PROCESS_GROUP_TIMEOUT)


@dataclass(frozen=True)
class _RankZeroOutcome:
    value: Any = None
    error: str | None = None
    error_is_value_error: bool = False


def rank_zero_result(compute: Callable[[], T], rank: int) -> T:
    """`compute()` run on rank 0 alone, its result given to every rank; where it raises, every rank raises with its
    message (a ValueError as a ValueError, anything else as a RuntimeError) instead of waiting for a result."""
    import torch.distributed as dist

    outcome: list[Any] = [None]
    failure: Exception | None = None
    if rank == 0:
        try:
            outcome[0] = _RankZeroOutcome(value=compute())
        except Exception as error:  # any error: the other ranks wait on the broadcast below
            failure = error
            outcome[0] = _RankZeroOutcome(error=str(error), error_is_value_error=isinstance(error, ValueError))
    dist.broadcast_object_list(outcome, src=0)
    if failure is not None:
        raise failure
    result: _RankZeroOutcome = outcome[0]
    if result.error is None:
        return result.value
    if result.error_is_value_error:
        raise ValueError(result.error)
    raise RuntimeError(f"rank 0 failed, so this rank stops too: {result.error}")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("true", "1", "yes")
