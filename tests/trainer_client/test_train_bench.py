"""`regrow bench train`'s batch: on-policy, so that its SDPO figures are a trainer step's, not an artefact."""

import pytest

from tests.trainer_client.tiny_policy import tiny_qwen2
from trainer_client.rollout.rows import EPISODE_SLOT

pytestmark = pytest.mark.train


def test_the_bench_batch_is_on_policy_so_sdpo_tokens_keep_their_weight(tmp_path, tokenizer, episode_tokens):
    from regrow.bench.training import _timed_step, bench_trainer, synthetic_trajectories

    model = tiny_qwen2(tokenizer)
    trajectories = synthetic_trajectories(episode_tokens, rows=2, turns=2, hinted_share=0.5, policy=model)
    trainer = bench_trainer(model, tokenizer, trajectories, episode_tokens, [], tmp_path, alpha_sdpo=1.0)

    _timed_step(trainer, [{"prompt": EPISODE_SLOT}] * 2)

    # a fixed logprob far from the model's once weighted every distilled token by exp(model - fixed), about 1e-4
    assert trainer._metrics["train"]["sdpo/importance_ratio_mean"][-1] == pytest.approx(1.0, abs=1e-3)
    assert trainer._metrics["train"]["sdpo/distilled_tokens"][-1] > 0


def test_bench_train_on_two_processes_with_lora_keeps_the_ranks_in_step():
    import json
    import subprocess
    import sys
    from pathlib import Path

    regrow = Path(sys.executable).parent / "regrow"
    command = [str(regrow), "bench", "train", "--model", "tiny", "--steps", "1", "--rows", "4", "--turns", "2"]
    done = subprocess.run(
        [*command, "--pairs", "2", "--lora", "4", "--processes", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert (result["processes"], result["lora_r"], result["rows_per_process"]) == (2, 4, 2)
    # Each rank trained on other rows: only gradients all-reduced between them leave the same weights on both.
    assert result["ranks_in_sync"] is True
    assert len({rank["weights_digest"] for rank in result["per_process"]}) == 1
    assert 0 < result["trainable_parameters"] < 100_000  # the adapter's, not the model's millions
    assert result["three_channel_step_s"] >= max(rank["three_channel_step_s"] for rank in result["per_process"]) > 0


def test_bench_train_refuses_rows_that_do_not_split_over_the_processes():
    from typer.testing import CliRunner

    from regrow.cli import app

    result = CliRunner().invoke(app, ["bench", "train", "--rows", "6", "--processes", "2"])
    assert result.exit_code == 1
    assert "give rows a multiple of 4" in " ".join(result.output.split())  # rich wraps its lines
