"""`regrow bench sampling` and the OpenMP wait policy the trainer sets before torch loads."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.train

POLICY_IN_A_FRESH_INTERPRETER = (
    "import os, trainer_client.rollout.hf_sampler, torch; "
    "print(os.environ.get('OMP_WAIT_POLICY'), torch.get_num_threads())"
)


def _fresh(env_policy: str | None) -> str:
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    if env_policy is not None:
        env["OMP_WAIT_POLICY"] = env_policy
    done = subprocess.run(
        [sys.executable, "-c", POLICY_IN_A_FRESH_INTERPRETER], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.split()[0]


def test_the_trainer_waits_passively_unless_the_user_chose_a_policy():
    # spinning OpenMP threads beside an env's test runs made CPU sampling several times slower
    assert _fresh(None) == "PASSIVE"
    assert _fresh("ACTIVE") == "ACTIVE"


def test_bench_sampling_measures_each_policy_beside_busy_processes():
    from typer.testing import CliRunner

    from regrow.cli import app

    # One policy: each probe is a fresh interpreter beside a spinning one, minutes of CPU on a loaded CI machine.
    arguments = ["bench", "sampling", "--model", "tiny", "--busy", "1", "--batch", "2", "--wait-policy", "PASSIVE"]
    arguments += ["--context", "16", "--new-tokens", "8", "--threads", "1", "--json"]
    result = CliRunner().invoke(app, arguments)

    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    runs = [(run["wait_policy"], run["busy_processes"]) for run in report["runs"]]
    assert runs == [("PASSIVE", 1)]
    # no stop token: every row writes every token, so the runs compare the same work
    assert all(run["tokens"] == 16 and run["tokens_per_s"] > 0 for run in report["runs"])


def test_bench_sampling_refuses_a_wait_policy_openmp_does_not_know():
    from typer.testing import CliRunner

    from regrow.cli import app

    result = CliRunner().invoke(app, ["bench", "sampling", "--model", "tiny", "--wait-policy", "spin"])

    assert result.exit_code != 0
    assert "--wait-policy SPIN" in result.output
