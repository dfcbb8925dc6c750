"""Where a run's processes and weights are: the rank and world `accelerate launch` (or torchrun) set, the processes on
this host, each process's device, and what a run whose weights are sharded over them refuses."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer_client.train.settings import TrainSettings


def process_rank() -> tuple[int, int]:
    """(rank, world size) as `accelerate launch` or torchrun set them; (0, 1) for a process alone."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def local_processes() -> int:
    """The training processes `accelerate launch` or torchrun started on this host (1 without a launcher)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def resolve_device(choice: str) -> str:
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda, but torch sees no CUDA device; use --device cpu or auto")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


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
    copied_teacher = settings.sdpo_teacher == "ema" or (settings.sdpo_teacher == "initial" and not settings.lora_r)
    if settings.alpha_sdpo and copied_teacher:
        problems.append(
            f"--sdpo-teacher {settings.sdpo_teacher} keeps or updates a teacher from sharded weights as if they were "
            "whole; use --sdpo-teacher live, or --lora-r (its initial teacher is the adapter switched off)"
        )
    if sharding == "zero3" and (settings.alpha_sdpo or settings.beta_dpo):
        problems.append(
            "ZeRO-3 gathers every module's weights as it is called, the LM head's too, and the SDPO and DPO channels "
            "call it as often as their data asks; run --alpha-sdpo or --beta-dpo under FSDP "
            "(deploy/accelerate/fsdp.yaml), whose ranks run the same forwards, or DDP (deploy/accelerate/ddp.yaml)"
        )
    if problems:
        listed = "".join(f"\n  - {problem}" for problem in problems)
        raise ValueError(f"under {sharding} sharding this run would hang or train on wrong weights:{listed}")
