"""Under `accelerate launch` with FSDP and cpu-RAM-efficient loading, the host holds one copy of the policy's weights:
rank 0 alone reads them, the others build the model around empty memory, and accelerate's FSDP2 prepare gives every
rank its shard of rank 0's. Alone or under DDP every process loads its own copy, as before."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.tiny_chat_model import random_qwen2
from tests.trainer_client.rank_load import IDS
from tests.trainer_client.tiny_policy import save_tiny_policy, train_tokenizer

pytestmark = pytest.mark.train

ROOT = Path(__file__).parents[2]
FSDP_ENV = {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}


def _run(model: Path, rank: int = 0, world: int = 1, **overrides):
    from trainer_client.train.prepared_run import PreparedRun
    from trainer_client.train.settings import TrainSettings

    settings = TrainSettings(env=["http://127.0.0.1:9"], model=str(model), device="cpu", weights_dtype="float32")
    return PreparedRun(settings.model_copy(update=overrides), "cpu", "cpu", rank, world, [])


def _checkpoint(model: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(model / "model.safetensors")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return save_tiny_policy(tmp_path_factory.mktemp("policy"))


@pytest.mark.parametrize(
    ("env", "rank", "world"),
    [(FSDP_ENV, 0, 1), ({"ACCELERATE_USE_FSDP": "true"}, 1, 2), ({}, 1, 2)],
    ids=["fsdp-alone", "fsdp-without-ram-efficient-loading", "ddp"],
)
def test_a_process_alone_or_under_ddp_loads_its_own_copy(tiny_model, monkeypatch, env, rank, world):
    from trainer_client.train.sharded_loading import rank_zero_reads_weights
    from trainer_client.train.training_policy import load_training_policy

    for name in FSDP_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert not rank_zero_reads_weights(world)
    model = load_training_policy(_run(tiny_model, rank, world)).model
    checkpoint = _checkpoint(tiny_model)
    assert all(torch.equal(parameter, checkpoint[name]) for name, parameter in model.named_parameters())
    assert not torch.distributed.is_initialized()  # no process group was started for it


def test_an_empty_policy_has_the_loaded_shape_ties_and_buffers_and_storage_of_its_own(tmp_path):
    from trainer_client.policy.policy_loading import empty_policy, load_policy

    tokenizer = train_tokenizer()
    tied = random_qwen2(tokenizer, hidden_size=48, intermediate_size=96, max_positions=512, tie_embeddings=True)
    tied.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, _ = load_policy(str(tmp_path))
    empty, empty_tokenizer = empty_policy(str(tmp_path))

    def shapes(model):
        return {name: (tensor.shape, tensor.dtype) for name, tensor in model.state_dict().items()}

    assert shapes(empty) == shapes(loaded) and empty_tokenizer.padding_side == "left"
    assert empty.lm_head.weight is empty.model.embed_tokens.weight  # one parameter, as in the loaded model
    assert all(torch.equal(buffer, loaded.get_buffer(name)) for name, buffer in empty.named_buffers())
    storage = [parameter.data_ptr() for parameter in empty.parameters()]
    # Distinct, non-zero: accelerate's FSDP2 prepare swaps the optimizer's parameters for the shards by data_ptr().
    assert {parameter.device.type for parameter in empty.parameters()} == {"cpu"}
    assert len(set(storage)) == len(storage) and 0 not in storage


def test_two_fsdp_ranks_hold_one_copy_and_shard_rank_zeros_weights(tiny_model, tmp_path):
    from regrow.bench.training import synthetic_pairs
    from trainer_client.channels.preference_pairs import BF16_AUTOCAST, write_pairs
    from trainer_client.policy.policy_loading import load_policy

    model, tokenizer = load_policy(str(tiny_model))
    pairs = synthetic_pairs(tokenizer, model, count=2, context_turns=0)
    write_pairs(tmp_path / "wrong.jsonl", [pair.model_copy(update={"reference_weights": "0" * 64}) for pair in pairs])
    unscored = {"reference_precision": BF16_AUTOCAST, "reference_chosen_logp": 0.0, "reference_rejected_logp": 0.0}
    write_pairs(tmp_path / "stale.jsonl", [pair.model_copy(update=unscored) for pair in pairs])
    with torch.no_grad():
        logits = model(torch.tensor(IDS)).logits
    checkpoint = _checkpoint(tiny_model)  # before rank 0 deletes the file
    folder = tmp_path / "policy"
    folder.mkdir()
    for file in tiny_model.iterdir():
        (folder / file.name).write_bytes(file.read_bytes())

    out = tmp_path / "out"
    out.mkdir()
    torchrun = str(Path(sys.executable).parent / "torchrun")
    command = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "tests.trainer_client.rank_load", str(out)]
    command += [str(folder), str(tmp_path / "wrong.jsonl"), str(tmp_path / "stale.jsonl")]
    env = {**os.environ, **FSDP_ENV, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(out / f"rank{rank}.pt") for rank in range(2)]

    # (c) A wrong pairs file fails every rank with rank 0's message; stale pairs reach every rank scored again.
    assert "pairs in" in ranks[0]["error"] and ranks[1]["error"] == ranks[0]["error"]
    expected = {pair.trace_id: (pair.reference_chosen_logp, pair.reference_rejected_logp) for pair in pairs}
    shares = [share for seen in ranks for share in seen["pairs"]]
    assert sorted(trace for trace, *_ in shares) == sorted(expected)
    for trace, precision, chosen, rejected in shares:
        assert precision == "float32" and (chosen, rejected) == pytest.approx(expected[trace], abs=1e-5)

    # (a) Rank 0 read the weights; rank 1 built its model after the file was gone, on storage of its own.
    assert all(torch.equal(tensor, checkpoint[name]) for name, tensor in ranks[0]["params"].items())
    assert ranks[1]["devices"] == ["cpu"] and ranks[1]["distinct_storage"]

    # (b) After accelerate's FSDP2 prepare every rank computes with the checkpoint's weights.
    for seen in ranks:
        assert seen["full"].keys() == checkpoint.keys()
        assert all(torch.equal(seen["full"][name], checkpoint[name]) for name in checkpoint)
        torch.testing.assert_close(seen["logits"], logits)
