"""A training run once it is checked, before its model loads: its settings (the weights' dtype and the rows a forward
takes settled), this process's device, rank and world, and the DPO channel's pairs. Whatever a run cannot do is
refused here, in seconds, and not after the slow load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainer_client.train.memory_plan import check_memory, launched_sharding
from trainer_client.train.placement import check_sharding, process_rank, rank_device, resolve_device
from trainer_client.train.settings import TrainSettings
from trainer_client.train.trainer_config import local_groups

if TYPE_CHECKING:
    from trainer_client.channels.preference_pairs import PreferencePair


@dataclass(frozen=True)
class PreparedRun:
    """What every later step of a run reads: the settings as checked, the device kind (`cuda`, `cpu`) and this
    process's own (`cuda:1`), its rank among `world` processes, and the DPO pairs (none without --beta-dpo)."""

    settings: TrainSettings
    device: str
    placement: str
    rank: int
    world: int
    pairs: list[PreferencePair]


def prepare_run(settings: TrainSettings) -> PreparedRun:
    """Check `settings` against the launch, the device, the memory and the vLLM server, and settle what the load
    reads: the weights' dtype (the pairs' reference dtype, where they agree) and, unless given, the most rows a
    forward takes that fit."""
    from trainer_client.rollout.vllm_server import check_vllm_ready

    rank, world = process_rank()
    local_groups(settings, world)  # said before the model loads
    sharding = launched_sharding()
    check_sharding(settings, sharding)
    device = resolve_device(settings.device)
    placement = rank_device(device)  # before the memory check reads the current device's size
    pairs = read_dpo_pairs(settings, world)
    pairs_dtypes = sorted({pair.reference_dtype for pair in pairs})
    dtype = settings.weights_dtype_on(device, pairs_dtypes[0] if len(pairs_dtypes) == 1 else None, sharding)
    settings = settings.model_copy(update={"weights_dtype": dtype})  # the plan and the load read the same dtype
    if settings.memory_check:
        rows_at_once = check_memory(settings, device)
        if settings.micro_batch_rows is None and rows_at_once is not None:  # the most rows at once that fit
            settings = settings.model_copy(update={"micro_batch_rows": rows_at_once})
    if settings.vllm_server:
        check_vllm_ready(settings.vllm_server, device, settings.vllm_timeout_s)  # before the slow model load
    return PreparedRun(settings, device, placement, rank, world, pairs)


def read_dpo_pairs(settings: TrainSettings, world: int) -> list[PreferencePair]:
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
