"""End to end: the compose stack comes up from scratch, serves real tasks, trains, and leaves nothing behind."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.compose_stack import REPO, ComposeProject, output_tail

README = (REPO / "README.md").read_text()

pytestmark = [pytest.mark.docker, pytest.mark.train]


def _compose_v1_first() -> list[str]:
    """`docker-compose` (v1 on Debian bookworm) where installed; the v2 run is test_local_stack_v2_train.py."""
    return ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]


@pytest.fixture(scope="module")
def stack(docker_backend, base_image):
    """The local stack built and started from scratch; yields the project, its URL and its tasks."""
    # up to date is a no-op; otherwise the images would install a wheel of older code
    made = subprocess.run(["make", "app-image"], cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert made.returncode == 0, f"make app-image failed:\n{output_tail(made)}"
    project = ComposeProject(_compose_v1_first(), f"regrowe2e{os.getpid()}", REGROW_DEMO_TASKS="2")
    up = project.run("up", "-d", timeout=1800)
    try:
        assert up.returncode == 0, f"compose up failed:\n{output_tail(up)}\n{project.logs()}"
        project.wait_healthy()
        tasks = project.run("exec", "-T", "env-server", "cat", "/tasks/tasks.jsonl")
        assert tasks.returncode == 0, tasks.stderr
        yield {
            "project": project,
            "url": project.url,
            "tasks": [json.loads(line) for line in tasks.stdout.splitlines() if line.strip()],
        }
    finally:
        project.run("down", "-v", "--remove-orphans")


def test_synth_job_made_the_demo_tasks(stack):
    assert len(stack["tasks"]) == 2
    assert all(task["FAIL_TO_PASS"] and task["PASS_TO_PASS"] for task in stack["tasks"])


def test_openenv_client_plays_an_oracle_episode_to_reward_one(stack):
    from openenv.core.generic_client import GenericEnvClient

    task = stack["tasks"][0]
    with GenericEnvClient(base_url=stack["url"]).sync() as env:
        first = env.reset(task_id=task["instance_id"])
        assert first.observation["problem_statement"]
        patch = task["solution_patch"] if task["solution_patch"].endswith("\n") else task["solution_patch"] + "\n"
        applied = env.step(
            {"tool": "run", "args": {"command": f"git apply <<'REGROW_PATCH_END'\n{patch}REGROW_PATCH_END\n"}}
        )
        assert applied.observation["exit_code"] == 0, applied.observation
        final = env.step({"tool": "submit", "args": {}})
    assert final.done and final.reward == 1.0


def test_openenv_client_scores_an_empty_episode_zero(stack):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=stack["url"]).sync() as env:
        env.reset(task_id=stack["tasks"][1]["instance_id"])
        final = env.step({"tool": "submit", "args": {}})
    assert final.done and final.reward == 0.0
    assert final.observation["feedback"], "the final observation should summarise the failing tests"


def test_readme_snippet_for_your_own_trainer_runs_against_the_stack(stack, capsys):
    snippet = next(
        block for block in re.findall(r"```python\n(.*?)```", README, re.DOTALL) if "GenericEnvClient" in block
    )
    exec(compile(snippet.replace("http://127.0.0.1:8000", stack["url"]), "README.md", "exec"), {})
    assert "reward" in capsys.readouterr().out


def test_regrow_train_runs_two_steps_against_the_stack(stack, tmp_path):
    from tests.trainer_client.tiny_policy import save_tiny_policy

    save_tiny_policy(tmp_path / "policy")
    regrow = str(Path(sys.executable).parent / "regrow")
    trained = subprocess.run(
        [
            regrow,
            "train",
            "--env",
            stack["url"],
            "--model",
            str(tmp_path / "policy"),
            "--output-dir",
            str(tmp_path / "run"),
            "--steps",
            "2",
            "--group-size",
            "2",
            "--groups-per-step",
            "1",
            "--workers",
            "2",
            "--max-turns",
            "2",
            "--max-turn-tokens",
            "32",
            "--logger",
            "none",
            "--device",
            "cpu",
            "--uniform-groups",  # the random policy's groups are all 0: dropping them only plays more episodes
            "keep",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert trained.returncode == 0, output_tail(trained)
    assert (tmp_path / "run").is_dir()


def test_metrics_and_episodes_record_what_was_played(stack):
    metrics = httpx.get(f"{stack['url']}/metrics", timeout=10).text
    total = sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("regrow_episodes_total"))
    assert total >= 3
    episodes = httpx.get(f"{stack['url']}/episodes", timeout=10).json()
    rewards = [episode.get("reward") for episode in (episodes["episodes"] if isinstance(episodes, dict) else episodes)]
    assert 1.0 in rewards and 0.0 in rewards


def test_the_stack_serves_the_dashboard_and_the_viewer_from_its_installed_wheel(stack):
    """The pages' templates, script and stylesheet are package data: a wheel without them serves 500s here."""
    with httpx.Client(base_url=stack["url"], timeout=30) as http:
        dashboard = http.get("/dashboard")
        assert dashboard.status_code == 200 and "Recent episodes" in dashboard.text
        for asset in ("dashboard.js", "regrow.css"):
            assert http.get(f"/dashboard/static/{asset}").status_code == 200, asset
        graded = next(e for e in http.get("/episodes").json() if e.get("reward") is not None)
        viewer = http.get(f"/episodes/{graded['episode_id']}/view")
        assert viewer.status_code == 200 and "Reward, test by test" in viewer.text


def test_stack_down_leaves_no_sandbox_network_or_volume(stack, docker_backend):
    down = stack["project"].run("down", "-v", "--remove-orphans")
    assert down.returncode == 0, down.stderr
    assert stack["project"].leftovers(docker_backend) == []
