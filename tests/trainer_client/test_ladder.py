"""The channel ladder: A1-A4 trained from one start against a live `regrow serve`, evaluated on a held-out split."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from regrow.cli import app as regrow_app
from tests.live_process import free_port, served_subprocess
from tests.task_fixture import DEMO_TASK_ID, build_demo_task_store
from tests.trainer_client.tiny_policy import save_tiny_policy
from trainer_client.train.ladder import ARMS, LadderSettings, run_arm
from trainer_client.train.settings import TrainSettings

pytestmark = pytest.mark.train

HELD_OUT_ID = DEMO_TASK_ID + "-held-out"


def with_held_out_copy(store: Path) -> Path:
    """Add the demo task a second time, under another id, in the `test` split the ladder evaluates on."""
    record = json.loads((store / "tasks.jsonl").read_text().splitlines()[0])
    record.update(instance_id=HELD_OUT_ID, split="test")
    with (store / "tasks.jsonl").open("a") as records:
        records.write(json.dumps(record) + "\n")
    shutil.copytree(store / "hidden" / DEMO_TASK_ID, store / "hidden" / HELD_OUT_ID)
    return store


def tiny_pairs(policy_dir: Path, out: Path) -> Path:
    """Two replay pairs on the demo task, scored by the tiny policy as `regrow replay` scores them."""
    from proto import ToolCall, tool_specs
    from proto.transcript import format_tool_call, initial_messages
    from tests.task_fixture import demo_record
    from trainer_client.channels.preference_pairs import ChatMessage, PreferencePair, write_pairs
    from trainer_client.replay.policy_scorer import PolicyScorer

    scorer = PolicyScorer(policy_dir)
    messages = initial_messages(demo_record("unused").problem_statement, tool_specs())
    chosen = ToolCall(tool="read_file", args={"path": "calc/ops.py"})
    pairs = []
    for index, rejected in enumerate([ToolCall(tool="submit"), ToolCall(tool="list_dir")]):
        scores = [scorer.score(messages, format_tool_call(call)) for call in (chosen, rejected)]
        pairs.append(
            PreferencePair(
                trace_id=f"tiny-{index}",
                task_id=DEMO_TASK_ID,
                step_index=0,
                context=[ChatMessage(**message) for message in messages],
                chosen=chosen,
                rejected=rejected,
                chosen_text=format_tool_call(chosen),
                rejected_text=format_tool_call(rejected),
                reference_chosen_logp=scores[0].logp,
                reference_rejected_logp=scores[1].logp,
                chosen_tokens=scores[0].tokens,
                rejected_tokens=scores[1].tokens,
                reference_policy=scorer.name,
                reference_weights=scorer.weights,
                reference_dtype=scorer.dtype,
                teachers=["scripted"],
                agreement=1.0,
            )
        )
    write_pairs(out, pairs)
    return out


def test_an_arm_without_its_pairs_is_listed_as_not_run_and_says_why(tmp_path):
    train = TrainSettings(env="http://127.0.0.1:9", model="unused")
    for arm in ARMS[2:]:
        result = run_arm(arm, train, LadderSettings(out=tmp_path))
        assert not result.ran and "--pairs" in (result.reason or "") and result.pass_at_1 is None
        assert result.beta_dpo > 0


@pytest.mark.docker
def test_a_ladder_whose_env_lacks_the_evaluation_split_stops_before_any_arm_trains(
    docker_backend, base_image, tmp_path_factory
):
    store = build_demo_task_store(docker_backend, base_image, tmp_path_factory.mktemp("tasks"))  # train only
    out = tmp_path_factory.mktemp("ladder")
    serve = [str(Path(sys.executable).parent / "regrow"), "serve", "--tasks", str(store), "--host", "127.0.0.1"]
    serve += ["--grpc-port", str(free_port())]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with served_subprocess(serve, log, {**os.environ, "REGROW_SERVER_HOST": "127.0.0.1"}, 120, 60) as url:
        args = ["ladder", "--env", url, "--out", str(out), "--model", "no-such-policy", "--eval-split", "test"]
        result = CliRunner().invoke(regrow_app, args)
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert "split 'test'" in said and "train (1)" in said and "regrow synth --split test" in said
    assert not (out / "a1").exists() and not (out / "ladder.json").exists()  # said before the model even loaded


@pytest.mark.docker
def test_the_ladder_trains_four_arms_from_one_start_and_tables_their_own_figures(
    docker_backend, base_image, tmp_path_factory
):
    from trainer_client.channels.reference_policy import weights_sha256
    from trainer_client.policy.policy_loading import load_policy

    store = with_held_out_copy(build_demo_task_store(docker_backend, base_image, tmp_path_factory.mktemp("tasks")))
    policy = save_tiny_policy(tmp_path_factory.mktemp("tiny-policy"))
    pairs = tiny_pairs(policy, tmp_path_factory.mktemp("pairs") / "pairs.jsonl")
    out = tmp_path_factory.mktemp("ladder")
    serve = [str(Path(sys.executable).parent / "regrow"), "serve", "--tasks", str(store), "--host", "127.0.0.1"]
    serve += ["--grpc-port", str(free_port()), "--max-episodes", "4"]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with served_subprocess(serve, log, {**os.environ, "REGROW_SERVER_HOST": "127.0.0.1"}, 120, 60) as url:
        # one step each, one held-out task x 2 samples: the smallest ladder that still has every figure
        result = CliRunner().invoke(
            regrow_app,
            [
                "ladder", "--env", url, "--steps", "1", "--out", str(out), "--model", str(policy),
                "--task-id", DEMO_TASK_ID, "--group-size", "2", "--groups-per-step", "1", "--workers", "2",
                "--max-turns", "2", "--max-turn-tokens", "24", "--max-completion-tokens", "512", "--lr", "1e-3",
                "--pairs", str(pairs), "--dpo-pairs-per-step", "2", "--eval-split", "test", "--eval-tasks", "1",
                "--k", "2", "--seeds", "1", "--device", "cpu", "--logger", "none", "--save-steps", "100",
                "--uniform-groups", "keep",
            ],
        )  # fmt: skip
    assert result.exit_code == 0, result.output

    table = json.loads((out / "ladder.json").read_text())
    arms = table["arms"]
    assert [arm["name"] for arm in arms] == [arm.name for arm in ARMS]
    assert table["start_weights_sha256"] == weights_sha256(load_policy(str(policy))[0])
    markdown = (out / "ladder.md").read_text()
    assert all(f"| {arm['name']} |" in markdown for arm in arms)
    for arm in arms:
        assert arm["ran"] and arm["steps"] == 1 and arm["eval_episodes"] == 2
        assert 0 <= arm["pass_at_1"] <= arm["mean_reward"] + 1e-9 <= 1 + 1e-9 or arm["pass_at_1"] == 0
        assert arm["train_s"] > 0 and arm["eval_s"] > 0 and arm["tokens_generated"] > 0
    # each arm trained with its own channels: the losses it logged are those of its channels and no others
    assert [sorted(arm["final_losses"]) for arm in arms] == [
        ["rlvr/loss"],
        ["rlvr/loss", "sdpo/loss"],
        ["dpo/loss", "rlvr/loss"],
        ["dpo/loss", "rlvr/loss", "sdpo/loss"],
    ]
    assert [arm["alpha_sdpo"] > 0 for arm in arms] == [False, True, False, True]
    assert [arm["beta_dpo"] > 0 for arm in arms] == [False, False, True, True]
    assert arms[0]["sdpo_teacher_tokens"] == 0 and arms[1]["sdpo_teacher_tokens"] > 0
    # and each was evaluated from its own final weights, in its own folder
    finals = {weights_sha256(load_policy(str(Path(arm["run_dir"]) / "final"))[0]) for arm in arms}
    assert len({arm["run_dir"] for arm in arms}) == 4 and len(finals) == 4


def test_the_arm_in_training_reports_its_rollouts_as_they_come(monkeypatch, tmp_path):
    """A ladder step can take minutes: the arm's progress reaches the caller while it trains, not a frozen bar."""
    from trainer_client.train import run
    from trainer_client.train.ladder import run_arm
    from trainer_client.train.progress import RolloutProgress

    reading = RolloutProgress(
        step=0, steps=1, episodes=3, episodes_needed=8, turns=5, mean_reward=None, replays=0, env_waits=0,
        groups_dropped=0,
    )  # fmt: skip

    def training(settings, show_progress=None):
        show_progress(reading)
        raise RuntimeError("stop here: the evaluation is not under test")

    monkeypatch.setattr(run, "run_training", training)
    seen = []
    train = TrainSettings(env=["http://127.0.0.1:9"], output_dir=tmp_path)
    with pytest.raises(RuntimeError, match="stop here"):
        run_arm(ARMS[0], train, LadderSettings(out=tmp_path), lambda arm, progress: seen.append((arm, progress)))
    assert seen == [(ARMS[0].name, reading)]


def test_the_table_gives_each_arm_a_mean_with_its_interval_and_a_difference_from_a1_paired_by_seed():
    from trainer_client.train.ladder import ArmResult, LadderTable

    def run(arm, seed, score):
        figures = dict(mean_reward=score, train_s=1, eval_s=1, tokens_generated=1, sdpo_teacher_tokens=0)
        return ArmResult(name=ARMS[arm].name, seed=seed, ran=True, alpha_sdpo=0, beta_dpo=0, pass_at_1=score, **figures)

    scores = {0: [0.25, 0.5, 0.75], 1: [0.5, 0.5, 1.0]}  # A2 beats A1 by 0.25, 0, 0.25 seed by seed
    table = LadderTable(
        model="m", env="e", steps=1, seed=0, eval_split="test", eval_tasks=2, k=2, start_weights_sha256="0" * 64,
        seeds=[0, 1, 2], arms=[run(arm, seed, scores[arm][seed]) for arm in scores for seed in range(3)],
    )  # fmt: skip
    table.summarize()
    first, second = table.summary
    assert first.pass_at_1.mean == 0.5 and first.versus_first is None
    # sd 0.25 over 3 seeds: half-width 4.303 * 0.25 / sqrt(3)
    assert first.pass_at_1.high - 0.5 == pytest.approx(4.303 * 0.25 / 3**0.5)
    assert second.versus_first is not None and second.versus_first.mean == pytest.approx(1 / 6)
    assert second.versus_first.low < 0 < second.versus_first.high  # three seeds cannot tell these two apart
    markdown = table.markdown()
    assert "| A2 +SDPO | 0.667 [" in markdown and "| A2 +SDPO | 2 | 1.000 |" in markdown
    single = LadderTable(**{**table.model_dump(), "seeds": [0], "arms": [run(0, 0, 0.5)], "summary": []})
    single.summarize()
    assert "1 seed: no interval" in single.markdown()


def test_a_ladder_of_named_arms_without_evaluation_tables_each_runs_training_reward(monkeypatch, tmp_path):
    """`--arms a1 --eval-tasks 0` (recipe cpu-overfit): does a reward move the policy at all, read off the training
    reward of each seed's steps; no held-out split is needed, and nothing is evaluated."""
    from trainer_client.train import ladder, run
    from trainer_client.train.ladder import reward_trend, run_ladder
    from trainer_client.train.run import TrainSummary

    def training(settings, show_progress=None):
        rewards = [0.2, 0.4, 0.5, 0.9] if settings.seed == 0 else [0.1, 0.1, 0.6, 0.7]
        return TrainSummary(
            steps=4, episodes=8, groups_dropped_stale=0, episode_retries=0, groups_dropped_lost=0,
            groups_dropped_uniform=0, policy_tokens=100, final_model=tmp_path / "final",
            log_history=[
                {"loss": 0.0, "reward": reward, "rlvr/loss": 0.0, "optimizer/step_skipped": float(reward == 0.1)}
                for reward in rewards
            ],
        )  # fmt: skip

    monkeypatch.setattr(run, "run_training", training)
    monkeypatch.setattr(ladder, "start_weights", lambda train: "0" * 64)
    train = TrainSettings(env=["http://127.0.0.1:9"], task_ids=["t"], output_dir=tmp_path)  # no env is asked
    table = run_ladder(train, LadderSettings(out=tmp_path, arms=["a1"], eval_tasks=0, seeds=2))

    assert [(arm.name, arm.seed) for arm in table.arms] == [(ARMS[0].name, 0), (ARMS[0].name, 1)]
    assert [arm.train_rewards for arm in table.arms] == [[0.2, 0.4, 0.5, 0.9], [0.1, 0.1, 0.6, 0.7]]
    assert [arm.steps_skipped for arm in table.arms] == [0, 2]  # the steps the optimizer left alone
    assert all(arm.pass_at_1 is None and arm.eval_episodes == 0 for arm in table.arms)
    assert reward_trend([0.2, 0.4, 0.5, 0.9]) == pytest.approx((0.3, 0.7))  # the first half of the steps and the last
    markdown = (tmp_path / "ladder.md").read_text()
    assert "not evaluated (--eval-tasks 0)" in markdown and "| 0.300 -> 0.700 |" in markdown


def test_an_unknown_arm_is_refused_with_the_arms_there_are(tmp_path):
    with pytest.raises(ValueError, match="give one or more of a1, a2, a3, a4"):
        LadderSettings(out=tmp_path, arms=["a5"])
