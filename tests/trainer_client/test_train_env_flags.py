"""`regrow train --env URL --env URL`: several env servers, as flags or one variable, checked before any import."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer_client.train.settings import TrainSettings

REPO = Path(__file__).resolve().parents[2]
A, B = "http://10.0.0.1:8000", "grpc://10.0.0.2:50051"


def test_several_env_servers_come_from_repeated_flags(monkeypatch):
    monkeypatch.delenv("REGROW_TRAIN_ENV", raising=False)
    assert TrainSettings(env=[A, B]).env == [A, B]


@pytest.mark.parametrize("value", [f"{A},{B}", json.dumps([A, B]), A + " , " + B])
def test_several_env_servers_come_from_one_variable(monkeypatch, value):
    monkeypatch.setenv("REGROW_TRAIN_ENV", value)
    assert TrainSettings().env == [A, B]


def test_the_fault_settings_have_variables_too(monkeypatch):
    monkeypatch.setenv("REGROW_TRAIN_ENV_OUTAGE_S", "12")
    monkeypatch.setenv("REGROW_TRAIN_EPISODE_RETRIES", "0")
    settings = TrainSettings(env=A)
    assert (settings.env_outage_s, settings.episode_retries, settings.env_backoff_max_s) == (12.0, 0, 30.0)


def train_in_a_fresh_process(argv: list[str]) -> tuple[str, str]:
    """`regrow train ARGV` in a new interpreter: "exit_code torch_was_imported", and what it printed."""
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from regrow.cli import app\n"
        f"result = CliRunner().invoke(app, {['train', *argv]!r})\n"
        "print(result.exit_code, 'torch' in sys.modules)\n"
        "print(result.output)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    status, output = done.stdout.split("\n", 1)
    return status, output


def test_a_malformed_env_url_fails_at_once_before_torch_is_imported():
    status, output = train_in_a_fresh_process(["--env", "http://127.0.0.1:9", "--env", "localhost:8000"])
    assert status == "1 False"
    assert "'localhost:8000' is not a server address" in output and "http://host:port" in output


def test_a_vllm_server_that_does_not_answer_fails_before_torch_is_imported():
    status, output = train_in_a_fresh_process(["--env", "http://127.0.0.1:9", "--vllm-server", "http://127.0.0.1:9"])
    assert status == "1 False", output
    assert "no vLLM server answers at http://127.0.0.1:9" in " ".join(output.split())


def test_without_the_train_extra_training_says_what_to_install_instead_of_a_traceback():
    """On the core install (`make up`'s), `regrow train` ended in a ModuleNotFoundError traceback."""
    script = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if the train extra were not installed\n"
        "from typer.testing import CliRunner\n"
        "from regrow.cli import app\n"
        "result = CliRunner().invoke(app, ['train', '--env', 'http://127.0.0.1:9', '--device', 'cpu'])\n"
        "print(result.exit_code, type(result.exception).__name__)\n"
        "print(result.output)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    status, output = done.stdout.split("\n", 1)
    assert status == "1 SystemExit", done.stdout + done.stderr
    assert "train extra" in output and "regrow[train]" in " ".join(output.split())
