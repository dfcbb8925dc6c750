"""The same compose.yaml under Compose v2, with the `train` profile: the trainer service trains the demo policy against
the stack."""

import os
import re
import subprocess

import httpx
import pytest

from tests.compose_stack import REPO, ComposeProject, output_tail
from tests.compose_v2 import compose_v2_command

# Its fixture trains the demo policy on the CPU, beside the rest of the suite under `make test`: give it room.
pytestmark = [pytest.mark.docker, pytest.mark.train, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def train_stack(docker_backend, base_image):
    """The stack plus its trainer service, started with Compose v2; yields after the trainer has exited."""
    # always: the trainer's venv volume must be filled with this pyproject's `train` extra, not an earlier one
    # (the service wheelhouse is rebuilt only if its inputs changed)
    made = subprocess.run(["make", "wheelhouse-train"], cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert made.returncode == 0, f"make wheelhouse-train failed:\n{output_tail(made)}"
    project = ComposeProject(
        compose_v2_command(),
        f"regrowv2{os.getpid()}",
        REGROW_DEMO_TASKS="1",
        REGROW_TRAIN_STEPS="1",
        REGROW_TRAIN_MAX_TURNS="2",
        REGROW_TRAIN_MAX_TURN_TOKENS="48",
    )
    try:
        # the trainer runs the service image with this code
        app = subprocess.run(["make", "app-image"], cwd=REPO, capture_output=True, text=True, timeout=1800)
        assert app.returncode == 0, f"make app-image failed:\n{output_tail(app)}"
        up = project.run("--profile", "train", "up", "-d", timeout=1800)
        assert up.returncode == 0, f"compose v2 up failed:\n{output_tail(up)}\n{project.logs()}"
        project.wait_healthy()
        waited = project.run("wait", "trainer", timeout=2400)
        exit_code = re.search(r"(\d+)\s*$", waited.stdout)  # "0", or "container ... exited with status code 0"
        yield {
            "project": project,
            "trainer_exit": exit_code.group(1) if exit_code else waited.stdout + waited.stderr,
            "trainer_logs": project.run("logs", "--no-color", "trainer").stdout,
            "packages_logs": project.run("logs", "--no-color", "trainer-packages").stdout,
        }
    finally:
        project.run("--profile", "train", "down", "-v", "--remove-orphans")
        # torch is most of the suite's disk: `down -v` took its venv volume (5.5 GB), and its wheels (3.3 GB) go too
        for wheel in (REPO / ".cache/wheelhouse-train").rglob("*.whl"):
            wheel.unlink()


def test_trainer_service_trains_the_demo_policy_against_env_server(train_stack):
    assert train_stack["trainer_exit"] == "0", train_stack["trainer_logs"][-3000:]
    assert "trained 1 steps" in train_stack["trainer_logs"]


def test_the_trainers_episodes_are_recorded_by_the_env_server(train_stack):
    episodes = httpx.get(f"{train_stack['project'].url}/episodes", timeout=10).json()
    played = episodes["episodes"] if isinstance(episodes, dict) else episodes
    assert len(played) >= 2  # one GRPO group of two episodes


def test_the_train_venv_volume_was_filled_from_the_wheelhouse(train_stack):
    assert "train packages ready in /opt/regrow/train" in train_stack["packages_logs"], train_stack["packages_logs"]


def test_v2_down_leaves_nothing(train_stack, docker_backend):
    project = train_stack["project"]
    down = project.run("--profile", "train", "down", "-v", "--remove-orphans")
    assert down.returncode == 0, down.stderr
    assert project.leftovers(docker_backend) == []
