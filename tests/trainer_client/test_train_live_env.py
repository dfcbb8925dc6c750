"""Integration: `regrow train`'s run against a live `regrow serve` (real sandbox, real task), with the tiny policy."""

import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from env_server.traces.export import export_traces
from proto.dataset_files import DatasetFormat
from proto.traces import EpisodeTokens
from tests.live_process import free_port, stop, wait_healthy
from tests.task_fixture import DEMO_TASK_ID, build_demo_task_store
from tests.trainer_client.tiny_policy import save_tiny_policy, tiny_run_settings

pytestmark = [pytest.mark.docker, pytest.mark.train]

# Turns long enough for the demo task's tool calls; a checkpoint only at the end.
LIVE_LIMITS = dict(max_turns=3, max_turn_tokens=32, max_completion_tokens=1024, save_steps=100)


@pytest.fixture(scope="module")
def demo_store(docker_backend, base_image, tmp_path_factory) -> Path:
    return build_demo_task_store(docker_backend, base_image, tmp_path_factory.mktemp("tasks"))


def start_serve(store: Path, port: int, grpc_port: int, log) -> subprocess.Popen:
    """`regrow serve` on 127.0.0.1 over `store`, at most 4 episodes at once."""
    command = [str(Path(sys.executable).parent / "regrow"), "serve", "--tasks", str(store), "--host", "127.0.0.1"]
    return subprocess.Popen(
        [*command, "--port", str(port), "--grpc-port", str(grpc_port), "--max-episodes", "4"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "REGROW_SERVER_HOST": "127.0.0.1"},
    )


@pytest.fixture(scope="module")
def live_env(demo_store, tmp_path_factory):
    """`regrow serve` as a subprocess on 127.0.0.1 over the demo task store; yields (http URL, grpc URL)."""
    port, grpc_port = free_port(), free_port()
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("w")
    process = start_serve(demo_store, port, grpc_port, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
    except RuntimeError as error:
        process.kill()
        raise RuntimeError(f"{error}; see {log.name}") from None
    try:
        yield url, f"grpc://127.0.0.1:{grpc_port}"
    finally:
        stop(process, grace_s=60)
        log.close()


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-policy")
    return save_tiny_policy(folder)


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_three_training_steps_against_the_live_env(live_env, demo_store, tiny_policy_dir, tmp_path, transport):
    from transformers import AutoModelForCausalLM

    from trainer_client.train.run import run_training

    http_url, grpc_url = live_env
    settings = tiny_run_settings(
        http_url if transport == "ws" else grpc_url,
        tiny_policy_dir,
        tmp_path / "run",
        DEMO_TASK_ID,
        steps=3,
        learning_rate=1e-3,
        alpha_sdpo=1.0,
        **LIVE_LIMITS,
        episode_timeout_s=600,
    )
    summary = run_training(settings)

    assert summary.steps == 3 and summary.episodes >= 6
    losses = [entry[k] for entry in summary.log_history if "loss" in entry for k in ("loss", "rlvr/loss", "sdpo/loss")]
    assert len(losses) == 9 and all(math.isfinite(v) for v in losses)
    assert summary.distilled_tokens > 0
    before = AutoModelForCausalLM.from_pretrained(tiny_policy_dir)
    after = AutoModelForCausalLM.from_pretrained(summary.final_model)
    assert any(not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters()))
    # The policy's tokens of every kept episode, joined by the export to the server's own record of it.
    tokens = [EpisodeTokens.model_validate_json(line) for line in (tmp_path / "run" / "episode_tokens.jsonl").open()]
    assert len(tokens) >= summary.episodes and all(record.completion_ids for record in tokens)
    # what `regrow bench gpu --tokens` replays a step from: the rewards, and the hinted turns SDPO distilled
    assert all(record.reward is not None for record in tokens) and any(record.hinted_turns for record in tokens)
    exported = export_traces(
        demo_store / "traces.sqlite",
        tmp_path / "traces.parquet",
        DatasetFormat.parquet,
        tokens=[tmp_path / "run" / "episode_tokens.jsonl"],
    )
    assert exported.with_tokens == len({record.episode_id for record in tokens}) and exported.unmatched_tokens == 0


def test_two_ranks_under_torchrun_each_stream_their_own_groups_from_the_live_env(
    live_env, demo_store, tiny_policy_dir, tmp_path
):
    """`regrow train` as `accelerate launch` runs it: two gloo ranks on the CPU, each playing its share of a step's
    groups against the real server; the first rank saves the model."""
    out = tmp_path / "run"
    command = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "2", "-m", "regrow"]
    options = ["train", "--env", live_env[0], "--model", str(tiny_policy_dir), "--output-dir", str(out)]
    options += ["--task-id", DEMO_TASK_ID, "--device", "cpu", "--steps", "1", "--group-size", "2"]
    options += ["--groups-per-step", "2", "--workers", "2", "--logger", "none", "--max-turns", "3"]
    options += ["--max-turn-tokens", "32", "--max-completion-tokens", "1024", "--episode-timeout-s", "600"]
    options += ["--uniform-groups", "keep"]  # a random policy's groups are all 0: dropping them only plays more
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*command, *options], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 1 steps" in " ".join(done.stderr.split()) and (out / "final" / "config.json").is_file()
    for rank in (0, 1):  # each rank played and logged episodes of its own
        lines = (out / f"episode_tokens.rank{rank}.jsonl").read_text().splitlines()
        assert len(lines) >= 2 and all(EpisodeTokens.model_validate_json(line).completion_ids for line in lines)
    ids = [
        EpisodeTokens.model_validate_json(line).episode_id
        for rank in (0, 1)
        for line in (out / f"episode_tokens.rank{rank}.jsonl").read_text().splitlines()
    ]
    assert len(ids) == len(set(ids))


def test_training_outlives_an_env_server_killed_under_it_and_replays_what_it_lost(
    demo_store, tiny_policy_dir, tmp_path
):
    """The real `regrow serve` is SIGKILLed while `regrow train`'s episodes run on it, then started again on the same
    port: the run reconnects, replays the lost episodes, counts them, and finishes its steps."""
    from trainer_client.train.run import run_training

    port, grpc_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("w")
    server = start_serve(demo_store, port, grpc_port, log)
    outcome: dict[str, object] = {}
    try:
        wait_healthy(url, server, timeout_s=300)
        settings = tiny_run_settings(
            url,
            tiny_policy_dir,
            tmp_path / "run",
            DEMO_TASK_ID,
            steps=2,
            **LIVE_LIMITS,
            episode_timeout_s=900,
            env_health_interval_s=0.5,
        )

        def train() -> None:
            try:
                outcome["summary"] = run_training(settings)
            except BaseException as error:  # the assertion below reports it
                outcome["error"] = error

        trainer = threading.Thread(target=train, name="train", daemon=True)
        trainer.start()
        # Kill while episodes are in flight: the server's /health counts them.
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and trainer.is_alive():
            if httpx.get(f"{url}/health", timeout=5).json().get("active_episodes", 0) > 0:
                break
            time.sleep(0.2)
        assert trainer.is_alive(), f"training ended before any episode ran: {outcome}"
        server.kill()
        server.wait(timeout=60)
        time.sleep(2)  # the trainer meets a dead server, not only a restarting one
        server = start_serve(demo_store, port, grpc_port, log)
        wait_healthy(url, server, timeout_s=300)
        trainer.join(timeout=1500)
        assert not trainer.is_alive(), "training did not finish within 25 min of the server's restart"
    finally:
        stop(server, grace_s=60)
        log.close()

    assert "error" not in outcome, f"training failed after the server came back: {outcome.get('error')!r}"
    summary = outcome["summary"]
    assert summary.steps == 2 and summary.groups_dropped_lost == 0
    last = summary.log_history[-1]
    # The episodes on the killed server were lost after they started (replayed) or could not start (waited for).
    assert summary.episode_retries + last["rollout/unavailable_waits"] > 0, last


class EpisodeScripts:
    """A policy playing two-turn scripts, one per episode in order; an episode whose first context shows `marker`
    (a prefix reset's history) plays `prefix_script` instead, wherever the stream put its group."""

    def __init__(self, tokenizer, end_of_turn_id: int, scripts, prefix_script: list[str], marker: str):
        self.tokenizer, self.end_of_turn_id, self.version = tokenizer, end_of_turn_id, 0
        self.scripts, self.prefix_script, self.marker = scripts, prefix_script, marker
        self.turns: list[str] = []

    async def generate(self, context_ids: list[int], max_new_tokens: int):
        from trainer_client.rollout.agent_loop import GeneratedTurn

        if not self.turns:  # a new episode
            seen = self.tokenizer.decode(context_ids)
            self.turns = list(self.prefix_script if self.marker in seen else next(self.scripts))
        ids = self.tokenizer.encode(self.turns.pop(0), add_special_tokens=False) + [self.end_of_turn_id]
        return GeneratedTurn(ids=ids, logprobs=[-0.5] * len(ids), finished=True)


def test_prefix_sampling_starts_a_group_that_passed_whole_from_a_failed_episodes_prefix(
    live_env, tokenizer, episode_tokens
):
    """The stream, the prefix planner and the real server's prefix resets together: after a group of passes, a later
    group of the task starts from the first step of an episode that failed, and plays on from its workspace."""
    import itertools
    import json

    from tests.task_fixture import ORIGINAL_OPS, WRONG_OPS
    from trainer_client.rollout.agent_loop import EpisodeLimits
    from trainer_client.rollout.prefix_planner import PrefixPlanner
    from trainer_client.rollout.stream import RolloutStream
    from trainer_client.rollout.stream_settings import StreamSettings

    def call(name: str, **arguments) -> str:
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"

    write, submit = (lambda ops: call("write_file", path="calc/ops.py", content=ops)), call("submit")
    scripts = itertools.chain(  # a mixed group (one pass, one failure), then groups that pass whole
        [[write(ORIGINAL_OPS), submit], [write(WRONG_OPS), submit]], itertools.repeat([write(ORIGINAL_OPS), submit])
    )
    prefix_script = [call("read_file", path="calc/ops.py"), submit]  # reads what the prefix wrote, and gives up
    marker = json.dumps(WRONG_OPS)[1:-1]  # the failed episode's write, as its recorded call shows it
    sampler = EpisodeScripts(tokenizer, episode_tokens.end_of_turn_id, scripts, prefix_script, marker)
    planner = PrefixPlanner(itertools.repeat({"task_id": DEMO_TASK_ID}), fraction=0.5)
    limits = EpisodeLimits(max_turns=4, max_turn_tokens=4096, max_completion_tokens=16384)
    stream = RolloutStream(
        live_env[0],
        sampler,
        episode_tokens,
        limits,
        planner,
        StreamSettings(workers=1, group_size=2, max_buffered_groups=1),
    )
    groups: list = []
    with stream:  # the stream draws up to two groups ahead of the trainer, so the prefix group is the 4th or 5th
        while len(groups) < 6:
            (group,) = stream.next_groups(1, policy_version=0, timeout=300)
            planner.observe(group)
            groups.append(group)
            if "prefix_of" in group[0].reset_options:
                break

    assert sorted(t.reward for t in groups[0]) == [0.0, 1.0]
    assert all(t.reward == 1.0 for group in groups[1:-1] for t in group)
    failed = next(t for t in groups[0] if t.reward == 0.0)
    for trajectory in groups[-1]:
        assert trajectory.reset_options == {"prefix_of": failed.episode_id, "prefix_steps": 1}
        assert trajectory.reward == 0.0
        trace = httpx.get(f"{live_env[0]}/episodes/{trajectory.episode_id}", timeout=30).json()
        read = next(step for step in trace["steps"] if step["action"]["tool"] == "read_file")
        assert read["observation"]["output"] == WRONG_OPS  # the failed episode's first step, rebuilt
    assert stream.stats.prefix_refused == 0
