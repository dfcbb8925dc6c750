"""A `regrow train` run over two env servers logs the rollout stream's fault counters at every step."""

import pytest

from tests.trainer_client.scripted_env import serve_scripted_env
from tests.trainer_client.tiny_policy import save_tiny_policy, tiny_run_settings

pytestmark = pytest.mark.train

FAULT_COUNTERS = ("episode_retries", "groups_dropped_lost", "capacity_waits", "unavailable_waits", "backoff_s")


def test_every_step_logs_the_rollout_fault_counters(scripted_env_url, tmp_path):
    from trainer_client.train.run import run_training

    with serve_scripted_env() as second:
        settings = tiny_run_settings(
            [scripted_env_url, second],
            save_tiny_policy(tmp_path / "policy"),
            tmp_path / "run",
            "calc",
            steps=2,
            max_turns=2,
            max_turn_tokens=24,
            max_completion_tokens=512,
            save_steps=10,
            episode_timeout_s=300,
            env_health_interval_s=0.5,
        )
        summary = run_training(settings)

    assert summary.steps == 2 and summary.groups_dropped_lost == 0
    for entry in summary.log_history:
        assert {f"rollout/{name}" for name in FAULT_COUNTERS} <= set(entry), entry
