"""The channel ladder: does each channel help? Four arms trained from one start, then scored on held-out tasks.

A1 is Dr.GRPO alone, A2 adds SDPO, A3 adds trace-replay DPO, A4 has all three. Every arm loads the same initial
weights and runs once per seed; a seed fixes the task order, the sampling and the evaluation draws (k samples of each
of `eval_tasks` tasks of `eval_split`) for every arm. The table gives each arm's mean pass@1 over the seeds with a 95%
interval, its difference from A1 paired by seed, and each run's figures and cost, its training reward step by step
among them (`--arms a1 --eval-tasks 0` is the check that a reward moves the policy at all: recipe cpu-overfit).
"""

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, CliSuppress, SettingsConfigDict

from proto import is_pass
from trainer_client.train.ladder_stats import ArmSummary, interval, paired_difference
from trainer_client.train.run import TrainSummary
from trainer_client.train.settings import TrainSettings

if TYPE_CHECKING:
    from trainer_client.train.progress import RolloutProgress

logger = logging.getLogger(__name__)

# The channel weights of the arms that have a channel, when the run does not set them.
DEFAULT_ALPHA_SDPO = 1.0
DEFAULT_BETA_DPO = 0.1


@dataclass(frozen=True)
class Arm:
    """One rung: which extra channels it trains with."""

    name: str
    sdpo: bool
    dpo: bool

    @property
    def folder(self) -> str:
        return self.name.split()[0].lower()


ARMS = (
    Arm("A1 Dr.GRPO", sdpo=False, dpo=False),
    Arm("A2 +SDPO", sdpo=True, dpo=False),
    Arm("A3 +DPO", sdpo=False, dpo=True),
    Arm("A4 all three", sdpo=True, dpo=True),
)


class LadderSettings(BaseSettings):
    """What `regrow ladder` adds to the training settings: where the table goes and how arms are evaluated."""

    model_config = SettingsConfigDict(env_prefix="REGROW_LADDER_")

    out: Path = Field(description="Directory of the table (ladder.md, ladder.json) and of each arm's run.")
    eval_split: str = Field(default="test", description="Held-out task split the arms are evaluated on.")
    eval_tasks: int = Field(
        default=8,
        ge=0,
        description="Held-out tasks drawn (seeds 0..N-1 of the split); 0 evaluates nothing, and the table gives the "
        "training reward alone.",
    )
    k: int = Field(default=4, ge=1, description="Episodes per held-out task: pass@1 and mean reward over k samples.")
    recipe: str | None = Field(
        default=None,
        description="A ladder sized for one machine (cpu-demo, cpu-overfit, gpu-1x80gb, gpu-node-8x80gb): it sets the "
        "options not given, and says the model shape it is sized for and the hours it will take before the first arm "
        "trains.",
    )
    seeds: int = Field(
        default=3,
        ge=1,
        description="Seeds per arm, from --seed on: each seed fixes the task order, the sampling and the evaluation "
        "draws for every arm, so the table gives each arm's mean pass@1 with a 95% interval and its difference from "
        "A1 paired by seed.",
    )
    arms: list[str] = Field(
        default_factory=lambda: [arm.folder for arm in ARMS],
        description="The arms to run (a1 Dr.GRPO, a2 +SDPO, a3 +DPO, a4 all three; repeat the flag), by default all.",
    )

    @field_validator("arms")
    @classmethod
    def _known_arms(cls, arms: list[str]) -> list[str]:
        known = [arm.folder for arm in ARMS]
        if not arms or set(arms) - set(known):
            raise ValueError(f"--arms {' '.join(arms) or '(none)'}: give one or more of {', '.join(known)}")
        return arms


class ArmsTrainSettings(TrainSettings):
    """The training settings `regrow ladder` takes: `regrow train`'s but --output-dir, as each arm's is OUT/a1..a4."""

    output_dir: CliSuppress[Path] = TrainSettings.model_fields["output_dir"].default


class ArmResult(BaseModel):
    """One arm's figures, all from its own training run and its own evaluation."""

    name: str
    seed: int = 0
    ran: bool
    reason: str | None = Field(default=None, description="Why the arm did not run.")
    alpha_sdpo: float
    beta_dpo: float
    pass_at_1: float | None = None
    mean_reward: float | None = None
    train_s: float | None = None
    eval_s: float | None = None
    tokens_generated: int | None = Field(default=None, description="Policy tokens generated while training.")
    eval_episodes: int | None = None
    teacher_usd: float | None = Field(default=None, description="Replay teachers' spend on the pairs used.")
    sdpo_teacher_tokens: float | None = Field(default=None, description="Turn tokens the SDPO self-teacher scored.")
    steps: int | None = None
    episodes: int | None = None
    final_losses: dict[str, float] = Field(default_factory=dict, description="Last step's loss of each channel.")
    train_rewards: list[float] = Field(
        default_factory=list, description="Each training step's mean episode reward, in step order."
    )
    steps_skipped: int | None = Field(
        default=None, description="Steps whose gradient was zero everywhere: the optimizer left the weights alone."
    )
    run_dir: str | None = None
    curves: str | None = Field(default=None, description="The arm's TensorBoard folder.")


class LadderTable(BaseModel):
    """The ladder's result: the shared setup, then one entry per arm."""

    model: str
    env: str
    steps: int
    seed: int
    eval_split: str
    eval_tasks: int
    k: int
    start_weights_sha256: str
    seeds: list[int] = Field(default_factory=list)
    arms: list[ArmResult] = Field(description="One entry per arm and seed, in arm order.")
    summary: list[ArmSummary] = Field(default_factory=list, description="Each arm over its seeds.")

    def summarize(self) -> None:
        """Each arm's mean pass@1 over its seeds, and its paired difference from the first arm."""
        by_arm: dict[str, dict[int, float]] = {}
        for run in self.arms:
            if run.ran and run.pass_at_1 is not None:
                by_arm.setdefault(run.name, {})[run.seed] = run.pass_at_1
        first = by_arm.get(ARMS[0].name, {})
        self.summary = [
            ArmSummary(
                name=name,
                pass_at_1=interval(list(runs.values())),
                versus_first=None if name == ARMS[0].name else paired_difference(runs, first),
            )
            for name, runs in by_arm.items()
        ]

    def markdown(self) -> str:
        """The summary (one row per arm), then every run (one row per arm and seed)."""
        evaluated = (
            f"evaluated on {self.eval_tasks} `{self.eval_split}` tasks x {self.k} samples, the same draws for every arm"
            if self.eval_tasks
            else "not evaluated (--eval-tasks 0): the training reward is the figure"
        )
        head = (
            f"Ladder: {self.steps} steps of `{self.model}` from weights {self.start_weights_sha256[:12]}, seeds "
            f"{', '.join(map(str, self.seeds or [self.seed]))}; {evaluated}.\n\n"
            "| arm | pass@1, mean [95% interval] | minus A1, paired by seed |\n|---|---|---|\n"
        )
        summary = [
            f"| {arm.name} | {arm.pass_at_1.text()} | {arm.versus_first.text() if arm.versus_first else ''} |"
            for arm in self.summary
        ]
        runs_head = (
            "\n| arm | seed | pass@1 | mean reward | training reward, first half of the steps -> last | train s "
            "| eval s | tokens generated | teacher $ | SDPO teacher tokens | final losses | curves |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        )
        rows = []
        for arm in self.arms:
            if not arm.ran:
                rows.append(f"| {arm.name} | {arm.seed} | not run: {arm.reason} |  |  |  |  |  |  |  |  |  |")
                continue
            losses = ", ".join(f"{name} {value:.4g}" for name, value in arm.final_losses.items())
            rows.append(
                f"| {arm.name} | {arm.seed} | {_figure(arm.pass_at_1)} | {_figure(arm.mean_reward)} "
                f"| {_trend(arm.train_rewards)} | {arm.train_s:.0f} | {arm.eval_s:.0f} | {arm.tokens_generated} "
                f"| {_money(arm.teacher_usd)} | {arm.sdpo_teacher_tokens:.0f} | {losses} | {_link(arm.curves)} |"
            )
        return head + "\n".join(summary) + "\n" + runs_head + "\n".join(rows) + "\n"


def _link(folder: str | None) -> str:
    return f"[tensorboard]({folder})" if folder else ""


def _money(usd: float | None) -> str:
    return "n/a" if usd is None else f"{usd:.4f}"


def _figure(value: float | None) -> str:
    return "not evaluated" if value is None else f"{value:.3f}"


def reward_trend(rewards: list[float]) -> tuple[float, float]:
    """The mean training reward of the first half of the steps and of the last half (at least one step each)."""
    if not rewards:
        raise ValueError("no training step logged a reward")
    half = max(1, len(rewards) // 2)
    return sum(rewards[:half]) / half, sum(rewards[-half:]) / half


def _trend(rewards: list[float]) -> str:
    if not rewards:
        return ""
    first, last = reward_trend(rewards)
    return f"{first:.3f} -> {last:.3f}"


@dataclass(frozen=True)
class Evaluation:
    pass_at_1: float
    mean_reward: float
    episodes: int


def arm_settings(train: TrainSettings, arm: Arm, out: Path) -> TrainSettings:
    """The arm's training settings: the run's own, with only the channel weights and the output folder changed."""
    alpha = (train.alpha_sdpo or DEFAULT_ALPHA_SDPO) if arm.sdpo else 0.0
    beta = (train.beta_dpo or DEFAULT_BETA_DPO) if arm.dpo else 0.0
    # a fresh run in a folder of its own: no arm resumes from a checkpoint, its own or another's
    folder = out / arm.folder / f"seed{train.seed}"
    return train.model_copy(update={"alpha_sdpo": alpha, "beta_dpo": beta, "output_dir": folder, "resume": False})


def replay_spend(pairs: Path) -> float | None:
    """What `regrow replay` spent on the teachers to make `pairs`, from the report it wrote beside them."""
    report = pairs.with_suffix(".report.json")
    return float(json.loads(report.read_text())["cost_usd"]) if report.is_file() else None


def evaluate(model_dir: Path, train: TrainSettings, ladder: LadderSettings) -> Evaluation | None:
    """Play k samples of each held-out draw with the trained policy; pass@1 counts episodes that pass every test.
    None when the ladder evaluates nothing (--eval-tasks 0)."""
    if not ladder.eval_tasks:
        return None
    import torch

    from trainer_client.policy.policy_loading import load_policy
    from trainer_client.rollout.agent_loop import EpisodeLimits
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer
    from trainer_client.rollout.hf_sampler import HFTurnSampler
    from trainer_client.rollout.stream import RolloutStream
    from trainer_client.rollout.stream_settings import StreamSettings
    from trainer_client.train.placement import resolve_device

    torch.manual_seed(train.seed)  # the same sampling seed for every arm
    model, tokenizer = load_policy(str(model_dir), resolve_device(train.device))
    model.eval()
    tokens = EpisodeTokenizer(tokenizer)
    sampler = HFTurnSampler(model, tokenizer.pad_token_id, tokens.stop_ids, train.temperature, max_batch=train.workers)
    limits = EpisodeLimits(train.max_turns, train.max_turn_tokens, train.max_completion_tokens)
    draws = ({"seed": n, "split": ladder.eval_split} for n in range(ladder.eval_tasks))
    # tagged an evaluation: held-out draws say nothing of a training run's frontier
    playing = StreamSettings(
        workers=train.workers, group_size=ladder.k, max_staleness=0, reset_tags={"origin": "evaluation"}
    )
    stream = RolloutStream(train.env, sampler, tokens, limits, draws, playing, train.env_retries)
    with stream:
        groups = stream.next_groups(ladder.eval_tasks, policy_version=0, timeout=train.episode_timeout_s)
    rewards = [episode.reward for group in groups for episode in group]
    # equal k per task, so the mean of c/k over tasks is the share of passing episodes
    passed = sum(1 for reward in rewards if is_pass(reward))
    return Evaluation(pass_at_1=passed / len(rewards), mean_reward=sum(rewards) / len(rewards), episodes=len(rewards))


def preflight(train: TrainSettings, ladder: LadderSettings) -> None:
    """Check, before the first arm trains for minutes, that every env server holds the splits the ladder draws from;
    ValueError or EnvError says what is missing. The model and the pairs are checked next, by start_weights."""
    from trainer_client.env.task_splits import require_split

    for url in train.env:
        if ladder.eval_tasks:
            require_split(url, ladder.eval_split, 1, "the ladder's evaluation (--eval-split)")
        if not train.task_ids:
            require_split(url, train.split, 1, "training (--split)")


def start_weights(train: TrainSettings) -> str:
    """sha256 of the initial weights every arm starts from; the pairs are checked against them before any arm runs."""
    from trainer_client.channels.preference_pairs import read_pairs
    from trainer_client.channels.reference_policy import check_reference_policy, weights_sha256
    from trainer_client.policy.policy_loading import load_policy

    model, _ = load_policy(train.model, "cpu")
    if train.pairs is not None:
        check_reference_policy(read_pairs(train.pairs), model, train.model, str(train.pairs))
    return weights_sha256(model)


def _final_losses(summary: TrainSummary) -> dict[str, float]:
    last = summary.log_history[-1] if summary.log_history else {}
    return {name: float(last[name]) for name in ("rlvr/loss", "sdpo/loss", "dpo/loss") if name in last}


def run_arm(
    arm: Arm,
    train: TrainSettings,
    ladder: LadderSettings,
    on_progress: "Callable[[str, RolloutProgress], None] | None" = None,
) -> ArmResult:
    """Train one arm from the start weights, then evaluate it; every figure comes from this run."""
    from trainer_client.train.run import run_training

    settings = arm_settings(train, arm, ladder.out)
    figures = ArmResult(
        name=arm.name, seed=train.seed, ran=False, alpha_sdpo=settings.alpha_sdpo, beta_dpo=settings.beta_dpo
    )
    if arm.dpo and train.pairs is None:
        figures.reason = "needs --pairs pairs.jsonl (made by `regrow replay` from recorded traces and teachers)"
        return figures
    started = time.monotonic()
    shown = None if on_progress is None else (lambda progress: on_progress(arm.name, progress))
    summary = run_training(settings, show_progress=shown)
    trained = time.monotonic()
    evaluation = evaluate(summary.final_model, train, ladder)
    figures.ran = True
    if evaluation is not None:
        figures.pass_at_1, figures.mean_reward = evaluation.pass_at_1, evaluation.mean_reward
    figures.train_s, figures.eval_s = trained - started, time.monotonic() - trained
    figures.tokens_generated = summary.policy_tokens
    figures.eval_episodes = evaluation.episodes if evaluation is not None else 0
    figures.teacher_usd = replay_spend(train.pairs) if arm.dpo and train.pairs is not None else 0.0
    figures.sdpo_teacher_tokens = summary.distilled_tokens
    figures.steps, figures.episodes = summary.steps, summary.episodes
    figures.final_losses = {k: v for k, v in _final_losses(summary).items() if math.isfinite(v)}
    figures.train_rewards = [float(entry["reward"]) for entry in summary.log_history if "reward" in entry]
    figures.steps_skipped = sum(entry.get("optimizer/step_skipped", 0) == 1 for entry in summary.log_history)
    figures.run_dir = str(settings.output_dir)
    figures.curves = str(summary.curves) if summary.curves else None
    return figures


def run_ladder(
    train: TrainSettings,
    ladder: LadderSettings,
    on_arm: Callable[[ArmResult], None] | None = None,
    on_progress: "Callable[[str, RolloutProgress], None] | None" = None,
) -> LadderTable:
    """Run the arms (A1-A4, or those --arms names) in order and write the table to ladder.out as ladder.md and
    ladder.json."""
    preflight(train, ladder)
    ladder.out.mkdir(parents=True, exist_ok=True)
    table = LadderTable(
        model=train.model,
        env=", ".join(train.env),
        steps=train.steps,
        seed=train.seed,
        eval_split=ladder.eval_split,
        eval_tasks=ladder.eval_tasks,
        k=ladder.k,
        start_weights_sha256=start_weights(train),
        seeds=list(range(train.seed, train.seed + ladder.seeds)),
        arms=[],
    )
    for arm in (arm for arm in ARMS if arm.folder in ladder.arms):
        for seed in table.seeds:
            logger.info("ladder: %s, seed %d", arm.name, seed)
            result = run_arm(arm, train.model_copy(update={"seed": seed}), ladder, on_progress)
            table.arms.append(result)
            table.summarize()
            write_table(table, ladder.out)  # a crash in a later arm keeps the earlier ones
            if on_arm is not None:
                on_arm(result)
    return table


def write_table(table: LadderTable, out: Path) -> None:
    """ladder.json (the figures) and ladder.md (the same as a Markdown table) in `out`."""
    (out / "ladder.json").write_text(table.model_dump_json(indent=2) + "\n", encoding="utf-8")
    (out / "ladder.md").write_text(table.markdown(), encoding="utf-8")
