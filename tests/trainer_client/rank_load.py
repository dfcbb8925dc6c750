"""The policy loaded by the ranks torchrun started (gloo, on the CPU) as `regrow train` loads it under `accelerate
launch` with fsdp.yaml (ACCELERATE_USE_FSDP and FSDP_CPU_RAM_EFFICIENT_LOADING set by the caller), then sharded by
accelerate's own FSDP2 prepare. Each rank saves what it saw to OUT/rank<rank>.pt:

- `error`: the message of the load with WRONG pairs (scored by another model), which must fail;
- `pairs`: its share of the STALE pairs (scored at another precision), as rank 0 scored them again, loaded with LoRA;
- `devices`, `distinct_storage`, `params`: the parameters as loaded without pairs, rank 1 loading only after rank 0
  has deleted the weights file;
- `full`: the full state dict gathered from the sharded model, and `logits`: its forward on `IDS`.

`python -m tests.trainer_client.rank_load OUT MODEL WRONG STALE`"""

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist

from trainer_client.train.prepared_run import PreparedRun, read_dpo_pairs
from trainer_client.train.settings import TrainSettings
from trainer_client.train.training_policy import load_training_policy

IDS = [[5, 17, 42, 99, 7]]


def prepared(model: str, rank: int, **overrides: Any) -> PreparedRun:
    """The run `prepare_run` would give on the CPU (it refuses FSDP without a vLLM server, which needs CUDA)."""
    settings = TrainSettings(
        env=["http://127.0.0.1:9"], model=model, device="cpu", weights_dtype="float32", groups_per_step=2, **overrides
    )
    return PreparedRun(settings, "cpu", "cpu", rank, 2, read_dpo_pairs(settings, 2))


def wrong_pairs_error(model: str, rank: int, pairs: str) -> str:
    try:
        load_training_policy(prepared(model, rank, beta_dpo=1.0, pairs=pairs, dpo_pairs_per_step=2))
    except ValueError as error:
        return str(error)
    return ""


def stale_pairs_share(model: str, rank: int, pairs: str) -> list[tuple[str, str, float, float]]:
    run = prepared(model, rank, beta_dpo=1.0, pairs=pairs, dpo_pairs_per_step=2, lora_r=4)
    policy = load_training_policy(run)
    assert policy.pair_batches is not None
    return [
        (pair.trace_id, pair.reference_precision, pair.reference_chosen_logp, pair.reference_rejected_logp)
        for pair in next(policy.pair_batches)
    ]


def accelerate_fsdp2_prepare(model: Any, rank: int) -> Any:
    """`model` sharded by the function `Accelerator.prepare` runs for FSDP2 (accelerate runs no FSDP on CPU ranks,
    so the accelerator is reduced to what fsdp2_prepare_model reads of it)."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        cpu_ram_efficient_loading=True,
        state_dict_type="FULL_STATE_DICT",
    )
    accelerator = SimpleNamespace(
        state=SimpleNamespace(fsdp_plugin=plugin),
        mixed_precision="no",
        is_main_process=rank == 0,
        device=torch.device("cpu"),
    )
    return fsdp2_prepare_model(accelerator, model)


def load_once_the_weights_file_is_gone(model: str, rank: int) -> Any:
    """The policy without pairs: rank 0 loads it and deletes the weights file, and only then does rank 1 load."""
    if rank == 0:
        policy = load_training_policy(prepared(model, rank))
        (Path(model) / "model.safetensors").unlink()
        dist.barrier()
    else:
        dist.barrier()
        policy = load_training_policy(prepared(model, rank))
    return policy.model


def parameters_as_loaded(model: Any) -> dict[str, Any]:
    parameters = dict(model.named_parameters())
    storage = {parameter.data_ptr() for parameter in parameters.values()}
    return {
        "devices": sorted({parameter.device.type for parameter in parameters.values()}),
        "distinct_storage": len(storage) == len(parameters) and 0 not in storage,
        "params": {name: parameter.detach().clone() for name, parameter in parameters.items()},
    }


def main(out: Path, model: str, wrong: str, stale: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    rank = int(os.environ["RANK"])
    seen = {"error": wrong_pairs_error(model, rank, wrong), "pairs": stale_pairs_share(model, rank, stale)}
    policy = load_once_the_weights_file_is_gone(model, rank)
    seen |= parameters_as_loaded(policy)
    sharded = accelerate_fsdp2_prepare(policy, rank)
    seen["full"] = get_model_state_dict(sharded, options=StateDictOptions(full_state_dict=True))
    with torch.no_grad():
        seen["logits"] = sharded(torch.tensor(IDS)).logits
    torch.save(seen, out / f"rank{rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:5])
