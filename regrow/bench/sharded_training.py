"""`regrow bench train --processes N --sharding fsdp`: the bench's steps with the policy's weights sharded over N CPU
ranks by FSDP2, beside the same steps of one unsharded copy on every rank's rows, as one process would take them.

accelerate applies FSDP only on GPUs, so on a CPU the policy is sharded here as accelerate's FSDP2 wraps a causal LM
(`fully_shard` on each decoder layer, then on the whole model), and the trainer's loss is called by hand, with SGD
written out (FSDP2 averages the ranks' gradients, so the unsharded copy steps on the mean of theirs). The report says
how far the sharded update is from the unsharded one, per unit of update.
"""

from __future__ import annotations

import copy
import hashlib
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from regrow.bench.options import TrainBenchOptions

if TYPE_CHECKING:
    import torch

# SGD's step: small enough that the update is the gradient's, large enough that it is far above float32's rounding.
LEARNING_RATE = 1e-2


def sharded_like_accelerate(model: Any) -> Any:
    """A copy of `model` whose weights FSDP2 shards over every rank: each decoder layer its own group, the rest
    (embeddings, final norm, LM head) the root's."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from trainer_client.policy.prefix_cache import backbone_of

    sharded = copy.deepcopy(model)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in cast(Any, backbone_of(sharded)).layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    return sharded


def sgd(model: torch.nn.Module, learning_rate: float, divide: int = 1) -> None:
    """One SGD step on the gradients `model` holds, divided by `divide`; the gradients are then dropped."""
    import torch

    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.grad is not None:
                parameter.sub_(parameter.grad, alpha=learning_rate / divide)
                parameter.grad = None


def whole_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every weight whole: a sharded one gathered from the ranks (a collective), the others copied."""
    return {
        name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for name, p in model.named_parameters()
    }


def update_gap(updated: dict, expected: dict, start: dict) -> float:
    """|updated - expected| / |expected - start| over every weight: how far one update is from another, per unit."""
    apart = sum(float(((updated[name] - expected[name]) ** 2).sum()) for name in expected) ** 0.5
    moved = sum(float(((expected[name] - start[name]) ** 2).sum()) for name in expected) ** 0.5
    return apart / moved


def run_sharded_train_bench(options: TrainBenchOptions, rank: int, world: int) -> dict:
    """As rank `rank` of `world`: the step times of plain GRPO and of all three channels with sharded weights, and
    how far the three-channel update is from one unsharded process's on every rank's rows and pairs."""
    import torch
    import torch.distributed as dist

    from regrow.bench.training import bench_model, synthetic_pairs, synthetic_trajectories
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer
    from trainer_client.rollout.rows import EPISODE_SLOT

    torch.manual_seed(0)
    model, tokenizer = bench_model(options.model)
    tokens = EpisodeTokenizer(tokenizer)
    batch = synthetic_trajectories(tokens, options.rows, options.turns, options.hinted_share, policy=model)
    share = options.rows // world
    mine = batch[rank * share : (rank + 1) * share]
    pairs = synthetic_pairs(tokenizer, model, options.pairs, context_turns=options.turns // 2)
    slots = [{"prompt": EPISODE_SLOT} for _ in mine]
    with tempfile.TemporaryDirectory() as workdir:
        trainers = {
            name: _trainer(model, tokenizer, mine, tokens, pairs, Path(workdir) / name, options, **channels)
            for name, channels in (("grpo", {}), ("three_channel", three_channels(options)))
        }
        inputs = {name: trainer._generate_and_score_completions(slots) for name, trainer in trainers.items()}
    sharded = {name: sharded_like_accelerate(trainer.model).train() for name, trainer in trainers.items()}
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(options.steps + 1):  # alternate, so that load from other processes hits both alike
        for name, trainer in trainers.items():
            _use_pairs_of(trainer, pairs, rank, world)
            times[name].append(_timed_sharded_step(trainer, sharded[name], inputs[name]))
    every_rank: list[Any] = [None] * world
    dist.all_gather_object(every_rank, inputs["three_channel"])
    three = trainers["three_channel"]
    gap = update_gap(
        whole_weights(sharded["three_channel"]),
        _unsharded_steps(three, every_rank, pairs, options),
        whole_weights(three.model),
    )
    return {
        "model": options.model,
        "device": "cpu",
        "processes": world,
        "sharding": "fsdp",
        "lora_r": options.lora or None,
        "step_times_s": {name: values[1:] for name, values in times.items()},  # the first warms up
        "grpo_step_s": round(statistics.median(times["grpo"][1:]), 4),
        "three_channel_step_s": round(statistics.median(times["three_channel"][1:]), 4),
        "rows_per_process": share,
        "hinted_turns_of_process": sum(len(t.hinted_turns) for t in mine),
        "dpo_pairs_of_process": len(pairs) // world,
        "update_vs_unsharded": float(f"{gap:.3g}"),
        "weights_digest": _digest(whole_weights(sharded["three_channel"])),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }


def three_channels(options: TrainBenchOptions) -> dict:
    """The three-channel trainer's settings, as `regrow bench train` measures them unsharded."""
    return {"alpha_sdpo": 1.0, "beta_dpo": 0.1, "sdpo_teacher": "live", "dpo_context_grad": options.dpo_context_grad}


def _trainer(model, tokenizer, rows, tokens, pairs, workdir: Path, options: TrainBenchOptions, **channels) -> Any:
    """The bench's trainer on this rank's rows, with its model left unprepared: the bench shards its own copies."""
    from regrow.bench.training import TrainedAs, bench_trainer

    return bench_trainer(model, tokenizer, rows, tokens, pairs, workdir, TrainedAs(options.lora), **channels)


def _unsharded_steps(trainer: Any, every_rank: list[dict], pairs: list, options: TrainBenchOptions) -> dict:
    """The weights after the bench's steps of one unsharded copy, each on the mean gradient of every rank's rows."""
    unsharded = copy.deepcopy(trainer.model).train()
    for _ in range(options.steps + 1):
        for rank, inputs in enumerate(every_rank):
            _use_pairs_of(trainer, pairs, rank, len(every_rank))
            trainer._compute_loss(unsharded, inputs).backward()
        sgd(unsharded, LEARNING_RATE, divide=len(every_rank))
    return whole_weights(unsharded)


def _use_pairs_of(trainer: Any, pairs: list, rank: int, world: int) -> None:
    """Point the trainer's DPO channel (if on) at the first batch of rank `rank`'s share of `pairs`."""
    from trainer_client.channels.preference_pairs import PairBatches

    if trainer.pair_batches is not None:
        trainer.pair_batches = PairBatches(pairs, len(pairs), rank=rank, world=world)


def _timed_sharded_step(trainer: Any, model: torch.nn.Module, inputs: dict) -> float:
    start = time.perf_counter()
    trainer._compute_loss(model, inputs).backward()
    sgd(model, LEARNING_RATE)
    return time.perf_counter() - start


def _digest(weights: dict) -> str:
    """A hash of whole weights: every rank gathers the same ones."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(weights[name].float().numpy().tobytes())
    return digest.hexdigest()[:16]
