"""`regrow bench gpu` on the CPU: the shipped recording replayed through the trainer's step on a tiny shape."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from typer.testing import CliRunner  # noqa: E402

from proto import EpisodeTokens  # noqa: E402
from regrow.benchmarks.gpu_replay import (  # noqa: E402
    RECORDING,
    ShapeRun,
    read_recording,
    replay_rows,
    rewards_that_train,
)
from regrow.cli import app  # noqa: E402

pytestmark = pytest.mark.train


def test_the_shipped_recording_holds_groups_with_rewards_hints_and_turns():
    episodes = read_recording(RECORDING, 8)

    assert all(e.reward is not None for e in episodes)
    assert any(e.hinted_turns for e in episodes), "SDPO would have nothing to distill"
    for e in episodes:
        assert len(e.completion_ids) == len(e.logprobs) == len(e.env_mask)
        assert all(e.env_mask[t.start : t.end] == [1] * (t.end - t.start) for t in e.hinted_turns)
    rows = replay_rows(episodes)
    assert [len(turns) for turns in rows["sdpo_turns"]] == [len(e.hinted_turns) for e in episodes]


def test_a_group_whose_rewards_are_all_equal_gets_rewards_rlvr_has_a_gradient_for():
    def episode(reward):
        return EpisodeTokens(
            episode_id="e", policy_version=0, prompt_ids=[1], completion_ids=[2], logprobs=[-1.0], env_mask=[1],
            reward=reward,
        )  # fmt: skip

    episodes = [episode(0.0), episode(0.0), episode(1.0), episode(0.5), episode(None), episode(None)]

    assert rewards_that_train(episodes, group_size=2) == 2
    assert [e.reward for e in episodes] == [0.0, 1.0, 1.0, 0.5, 0.0, 1.0]


def test_bench_gpu_on_the_cpu_times_each_mix_and_measures_the_bf16_samplers_gap():
    command = ["bench", "gpu", "--shape", "tiny", "--mix", "rlvr", "--mix", "all", "--rows", "4", "--group-size", "2"]
    result = CliRunner().invoke(app, [*command, "--steps", "1", "--pairs", "2", "--device", "cpu", "--json"])

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["device"] == "cpu" and report["rows"] == 4
    (shape,) = report["shapes"]
    sampler = shape["bf16_sampler"]
    assert sampler["policy_tokens"] == report["policy_tokens_per_step"] > 0
    # bf16 rounds: the gap is real but small, and the IS ratio sits about 1
    assert 0 < sampler["logprob_gap_mean"] < 0.5
    assert 0.5 < sampler["is_ratio_mean"] < 2
    assert 0 <= sampler["clipped_share"] <= 1
    rlvr, everything = shape["mixes"]["rlvr"], shape["mixes"]["all"]
    assert rlvr["step_s"] > 0 and rlvr["tokens_per_s"] > 0 and rlvr["rlvr/grad_norm"] > 0
    assert "sdpo/grad_norm" not in rlvr
    assert everything["sdpo/distilled_tokens"] > 0 and everything["sdpo/grad_norm"] > 0
    assert everything["dpo/pairs"] == 2 and everything["dpo/grad_norm"] > 0
    assert "clip_ratio/region_mean" in everything["trl_clip_ratios"]


def test_a_shape_or_a_recording_that_cannot_be_replayed_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="shipped ones are tiny, qwen2.5-0.5b"):
        ShapeRun.parse("llama-70b")
    with pytest.raises(ValueError, match="use lora<rank> and bf16"):
        ShapeRun.parse("qwen2.5-7b:fp8")
    assert ShapeRun.parse("qwen2.5-7b:lora16:bf16") == ShapeRun("qwen2.5-7b", 16, "bfloat16")
    with pytest.raises(ValueError, match="give --rows 8"):
        read_recording(RECORDING, 9)
    result = CliRunner().invoke(app, ["bench", "gpu", "--tokens", str(tmp_path / "none.jsonl"), "--device", "cpu"])
    assert result.exit_code != 0 and "--record-tokens" in result.output


def test_the_gpu_check_imports_nothing_of_the_env_server_or_the_synthesizer():
    """A GPU box has torch, transformers, accelerate and peft, and takes the few wheels it lacks with it
    (deploy/gpu-check/wheels.txt): the check must not need the engine's, the server's or git's packages."""
    import subprocess
    import sys

    probe = (
        "import sys, regrow.gpu_check, regrow.benchmarks.gpu, trainer_client.train.grpo_trainer; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'env_server', 'task_synth', 'sandbox', 'docker', 'git', 'grpc', 'libcst', 'coverage'}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    assert result.stdout.strip() == "[]"
