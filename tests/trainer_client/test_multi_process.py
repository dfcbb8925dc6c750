"""`regrow train` over several processes: two CPU ranks (gloo, started by torchrun as `accelerate launch` starts
them) take the same optimizer step as one process on the same batch, and each rank streams a share of its own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.trainer_client.tiny_policy import tiny_qwen2, train_tokenizer

pytestmark = pytest.mark.train

ROOT = Path(__file__).parents[2]


def _step(out: Path, *launcher: str, swap: bool = False) -> dict[str, torch.Tensor]:
    out.mkdir()
    command = [*launcher, "-m", "tests.trainer_client.rank_step", str(out), *(["--swap"] if swap else [])]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out / "params0.pt")


def _relative(a: dict, b: dict, start: dict) -> float:
    """|a - b| / |a - start| over every parameter: how far two updates differ, per unit of update."""
    apart = sum(((a[name] - b[name]) ** 2).sum() for name in a) ** 0.5
    moved = sum(((a[name] - start[name]) ** 2).sum() for name in a) ** 0.5
    return float(apart / moved)


def test_two_ranks_take_the_step_one_process_takes_on_the_same_batch(tmp_path):
    start = dict(tiny_qwen2(train_tokenizer()).named_parameters())
    alone = _step(tmp_path / "alone", sys.executable)
    swapped = _step(tmp_path / "swapped", sys.executable, swap=True)
    torchrun = str(Path(sys.executable).parent / "torchrun")
    ranks = _step(tmp_path / "ranks", torchrun, "--standalone", "--nproc_per_node", "2")
    other = torch.load(tmp_path / "ranks" / "params1.pt")

    assert all(torch.equal(ranks[name], other[name]) for name in ranks)  # the ranks' gradients were all-reduced
    # The step's gradient is a sum whose terms cancel (a group's advantages sum to zero; chosen and rejected share
    # most tokens), so float32 summation order alone moves it: one process with its two groups swapped differs by
    # about 3e-4 of the update. Two ranks reorder every weight's sum (rows split, then gloo's sum): measured 2e-3.
    # A wrong normalization or a pair seen twice is off by a quarter of the update or more.
    floor = _relative(alone, swapped, start)
    assert 0 < floor < 1e-3
    assert _relative(alone, ranks, start) < 1e-2


def test_each_rank_resets_its_own_share_of_the_groups():
    from trainer_client.train.settings import TrainSettings
    from trainer_client.train.training_stream import reset_options

    seeded = TrainSettings(env=["http://127.0.0.1:9"], seed=3)
    alone = [next(options)["seed"] for options in [reset_options(seeded)] for _ in range(6)]
    ranks = [reset_options(seeded, rank, 2) for rank in range(2)]
    shares = [[next(options)["seed"] for _ in range(3)] for options in ranks]
    assert sorted(shares[0] + shares[1]) == sorted(alone) and not set(shares[0]) & set(shares[1])
    named = TrainSettings(env=["http://127.0.0.1:9"], task_ids=["a", "b", "c"])
    assert [next(reset_options(named, 1, 2))["task_id"]] == ["b"]


def test_a_step_whose_groups_do_not_split_over_the_ranks_is_refused():
    from trainer_client.train.settings import TrainSettings
    from trainer_client.train.trainer_config import local_groups

    settings = TrainSettings(env=["http://127.0.0.1:9"], groups_per_step=3)
    assert local_groups(settings, 1) == 3
    with pytest.raises(ValueError, match="give a multiple of 2"):
        local_groups(settings, 2)


def test_a_frontier_run_asks_the_env_for_its_sampler_on_every_drawn_reset():
    from trainer_client.train.settings import TrainSettings
    from trainer_client.train.training_stream import reset_options

    frontier = TrainSettings(env=["http://127.0.0.1:9"], sampler="frontier")
    assert next(reset_options(frontier)) == {"seed": 0, "split": "train", "sampler": "frontier"}
    assert "sampler" not in next(reset_options(TrainSettings(env=["http://127.0.0.1:9"])))
