"""`regrow bench gpu` on the CPU: the shipped recording replayed through the trainer's step on a tiny shape."""

import json
import time
import tomllib
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from typer.testing import CliRunner

from proto import EpisodeTokens
from regrow.bench import gpu_versions
from regrow.bench.gpu_replay import (
    RECORDING,
    ShapeRun,
    policy_spans,
    read_recording,
    replay_rows,
    rewards_that_train,
    stretched,
)
from regrow.bench.gpu_versions import version_ok
from regrow.cli import app

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
    micro_batches = ["--micro-batch-rows", "2"]  # two accumulated micro-batches, a DPO pair each
    result = CliRunner().invoke(
        app, [*command, *micro_batches, "--steps", "1", "--pairs", "2", "--device", "cpu", "--json"]
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["device"] == "cpu" and report["rows"] == 4
    assert {mix["micro_batch_rows"] for mix in report["shapes"][0]["mixes"].values()} == {2}
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
    assert everything["dpo/pairs"] == 1 and everything["dpo/grad_norm"] > 0  # a micro-batch's share of the 2
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
        "import sys, regrow.bench.gpu_check, regrow.bench.gpu, trainer_client.train.grpo_trainer; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'env_server', 'task_synth', 'sandbox', 'docker', 'git', 'grpc', 'libcst', 'coverage'}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    assert result.stdout.strip() == "[]"


@pytest.mark.pypi  # the carried wheels at their pinned versions
def test_the_gpu_check_runs_with_only_what_a_gpu_box_has_and_the_wheels_it_carries():
    """A box with torch, transformers, accelerate and peft, and deploy/gpu-check/wheels.txt: on an H200 the check
    first failed at `import pydantic`, which none of the four requires."""
    from tests.trainer_client.box_imports import run_as_on_a_box

    arguments = ["--device", "cpu", "--rows", "4", "--group-size", "2", "--mix", "all", "--pairs", "2", "--json"]
    result = run_as_on_a_box(arguments)

    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["shapes"][0]["mixes"]["all"]["dpo/pairs"] == 2


def _bench(*arguments: str):
    """`regrow bench gpu ARGUMENTS --json`: its exit status and its report."""
    result = CliRunner().invoke(app, ["bench", "gpu", *arguments, "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the default is the shipped shapes, minutes each")
def test_bench_gpu_with_no_arguments_on_a_cpu_measures_the_tiny_shape_and_reports_the_versions():
    status, report = _bench()

    assert status == 0, report["problems"]
    assert [shape["shape"] for shape in report["shapes"]] == ["tiny"]
    assert set(report["shapes"][0]["mixes"]) == {"rlvr", "rlvr+sdpo", "rlvr+dpo", "all"}
    for name in ("torch", "transformers", "peft", "accelerate"):
        assert report["versions"][name]["ok"], report["versions"][name]
        assert report["versions"][name]["found"] and report["versions"][name]["needed"]
    assert report["wall_s"] < 60


def test_a_shipped_shape_that_cannot_fit_a_cpu_host_is_refused_before_anything_is_allocated():
    started = time.perf_counter()
    status, report = _bench("--shape", "qwen2.5-7b", "--device", "cpu")

    assert time.perf_counter() - started < 30  # a 7B model in fp32 alone takes 28 GiB and minutes to make
    assert status == 1
    (shape,) = report["shapes"]
    assert shape["status"] == "refused" and "mixes" not in shape
    assert "GiB" in shape["reason"] and "--shape tiny" in shape["reason"]
    assert report["problems"] == [f"refused {shape['reason']}"]


def test_a_mix_that_fails_is_recorded_and_the_next_mix_still_runs(tmp_path):
    """SDPO needs each hinted turn's hint tokens: a recording that lost them fails that mix, and only that one."""
    episodes = read_recording(RECORDING, 2)
    for turn in episodes[0].hinted_turns:
        turn.hint_ids = []
    recording = tmp_path / "episode_tokens.jsonl"
    recording.write_text("".join(episode.model_dump_json() + "\n" for episode in episodes))

    status, report = _bench(
        "--tokens", str(recording), "--shape", "tiny", "--mix", "rlvr+sdpo", "--mix", "rlvr",
        "--rows", "2", "--group-size", "2", "--device", "cpu",
    )  # fmt: skip

    assert status == 1
    mixes = report["shapes"][0]["mixes"]
    assert mixes["rlvr+sdpo"] == {"error": {"type": "ValueError", "message": mixes["rlvr+sdpo"]["error"]["message"]}}
    assert "hint message's token ids" in mixes["rlvr+sdpo"]["error"]["message"]
    assert mixes["rlvr"]["step_s"] > 0 and mixes["rlvr"]["rlvr/grad_norm"] > 0
    assert report["problems"] == [f"tiny rlvr+sdpo: ValueError: {mixes['rlvr+sdpo']['error']['message']}"]


def test_pad_to_stretches_each_row_by_repeating_its_turns_with_masks_and_hints_that_still_line_up():
    (episode,) = read_recording(RECORDING, 1)
    recorded_turns = list(policy_spans(episode.env_mask))

    long = stretched(episode, 2000)

    assert len(long.prompt_ids) + len(long.completion_ids) == 2000
    assert len(long.logprobs) == len(long.env_mask) == len(long.completion_ids)
    assert len(list(policy_spans(long.env_mask))) > 3 * len(recorded_turns)
    assert len(long.hinted_turns) > 3 * len(episode.hinted_turns)
    for turn in long.hinted_turns:
        assert turn.hint_at <= turn.start < turn.end <= len(long.completion_ids)
        assert long.env_mask[turn.start : turn.end] == [1] * (turn.end - turn.start)
    assert stretched(episode, 100) == episode  # a row already longer is kept as it is

    status, report = _bench(
        "--shape", "tiny", "--mix", "rlvr", "--rows", "2", "--group-size", "2", "--pad-to", "1500", "--device", "cpu"
    )  # fmt: skip

    assert status == 0, report["problems"]
    assert report["pad_to"] == 1500 and report["tokens_per_step"] == 2 * 1500
    assert report["shapes"][0]["mixes"]["rlvr"]["tokens_per_s"] > 0


def test_a_version_the_trainer_was_not_written_for_stops_the_run_before_it_measures(monkeypatch):
    assert not version_ok("5.24.0", "==5.23.0")
    assert not version_ok(None, ">=1.0")  # not installed
    assert version_ok("2.15.0+cu132", ">=2.4")  # a CUDA build's local version still meets a range
    assert version_ok("0.21.2", "==0.21.2")
    monkeypatch.setitem(gpu_versions.NEEDED_VERSIONS, "transformers", "==5.22.0")

    status, report = _bench("--shape", "qwen2.5-7b", "--device", "cpu")

    assert status == 1 and report["shapes"] == []
    assert report["versions"]["transformers"]["ok"] is False
    assert "needs transformers==5.22.0" in report["problems"][0] and "--ignore-versions" in report["problems"][0]
    status, report = _bench("--shape", "qwen2.5-7b", "--device", "cpu", "--ignore-versions")
    assert report["shapes"][0]["status"] == "refused"  # it went on past the check


def test_the_versions_the_check_needs_are_pyproject_tomls_train_extra():
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    train = {
        req.name: req.specifier for req in map(Requirement, pyproject["project"]["optional-dependencies"]["train"])
    }

    assert {name: SpecifierSet(needed) for name, needed in gpu_versions.NEEDED_VERSIONS.items()} == {
        name: train[name] for name in gpu_versions.NEEDED_VERSIONS
    }
    assert {"torch", "transformers", "peft", "accelerate"} <= set(gpu_versions.NEEDED_VERSIONS)
