"""`regrow train` and `regrow bench train` (plus the replay part's `regrow replay`); heavy imports run late."""

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

console = Console(stderr=True)


def train(
    env: str = typer.Option(..., "--env", help="Env server: http://host:port (WebSocket) or grpc://host:port."),
    model: str = typer.Option("smollm2", "--model", help="save_pretrained folder, .gguf file, or 'smollm2' (offline demo)."),
    output_dir: Path = typer.Option(Path("runs/regrow"), "--output-dir", help="Checkpoints, TensorBoard logs (runs/), the final model."),
    task_id: list[str] = typer.Option([], "--task-id", help="Train on these tasks (repeat); default: sample by seed."),
    steps: int = typer.Option(100, min=1, help="Optimizer steps."),
    group_size: int = typer.Option(4, min=2, help="Episodes per task in one GRPO group."),
    groups_per_step: int = typer.Option(2, min=1, help="Groups per optimizer step."),
    workers: int = typer.Option(4, min=1, help="Concurrent rollout workers."),
    max_staleness: int = typer.Option(1, min=0, help="Drop groups started more than this many updates ago."),
    max_turns: int = typer.Option(12, min=1),
    max_turn_tokens: int = typer.Option(384, min=8),
    max_completion_tokens: int = typer.Option(3072, min=64, help="Token budget of all turns and env replies."),
    learning_rate: float = typer.Option(1e-6, "--lr"),
    temperature: float = typer.Option(1.0),
    loss_type: str = typer.Option("dr_grpo", help="TRL objective: dr_grpo (default), grpo, dapo, bnpo, cispo, sapo, ..."),
    alpha_sdpo: float = typer.Option(0.0, "--alpha-sdpo", min=0.0, help="Weight of SDPO on hinted turns (0: off)."),
    sdpo_teacher: str = typer.Option("live", help="SDPO teacher weights: live, ema or initial."),
    sdpo_jsd_alpha: float = typer.Option(0.5, min=0.0, max=1.0, help="0 forward KL, 1 reverse KL, between: JSD."),
    sdpo_top_k: int = typer.Option(None, min=1, help="Distil only the student's top-k tokens plus a tail bucket."),
    pairs: Path = typer.Option(None, "--pairs", exists=True, dir_okay=False, help="Replay pairs JSONL (regrow replay)."),
    beta_dpo: float = typer.Option(0.0, "--beta-dpo", min=0.0, help="Weight of the replay-DPO channel (0: off)."),
    dpo_beta: float = typer.Option(0.1, "--dpo-beta", help="The DPO loss's own beta."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    bf16: bool = typer.Option(True, help="bf16 autocast on a GPU."),
    logger: str = typer.Option("tensorboard", help="tensorboard or none."),
    save_steps: int = typer.Option(50, min=1, help="Checkpoint every N steps."),
    resume: bool = typer.Option(True, help="Continue from the last checkpoint in --output-dir."),
    seed: int = typer.Option(0),
) -> None:
    """Train a policy on env episodes: Dr.GRPO, plus SDPO on hinted turns and DPO on replay pairs."""
    from pydantic import ValidationError

    from trainer_client.env_client import EnvError
    from trainer_client.train_run import run_training
    from trainer_client.train_settings import TrainSettings

    given = dict(
        env=env, model=model, output_dir=output_dir, task_ids=task_id, steps=steps, group_size=group_size,
        groups_per_step=groups_per_step, workers=workers, max_staleness=max_staleness, max_turns=max_turns,
        max_turn_tokens=max_turn_tokens, max_completion_tokens=max_completion_tokens, learning_rate=learning_rate,
        temperature=temperature, loss_type=loss_type, alpha_sdpo=alpha_sdpo, sdpo_teacher=sdpo_teacher,
        sdpo_jsd_alpha=sdpo_jsd_alpha, sdpo_top_k=sdpo_top_k, pairs=pairs, beta_dpo=beta_dpo, dpo_beta=dpo_beta,
        device=device, bf16=bf16, logger=logger, save_steps=save_steps, resume=resume, seed=seed,
    )
    try:
        settings = TrainSettings(**{k: v for k, v in given.items() if v is not None})
        summary = run_training(settings)
    except (ValidationError, EnvError, FileNotFoundError, ValueError, RuntimeError, TimeoutError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    console.print(
        f"trained {summary.steps} steps on {summary.episodes} episodes "
        f"({summary.groups_dropped_stale} stale groups dropped, {summary.episode_retries} episode retries); "
        f"model saved to {summary.final_model}"
    )
    if summary.log_history:
        console.print({k: round(v, 5) if isinstance(v, float) else v for k, v in summary.log_history[-1].items()})


def bench_train(
    model: str = typer.Option("tiny", "--model", help="'tiny' (random 2-layer Qwen2), 'smollm2', or a model folder."),
    steps: int = typer.Option(3, min=1, help="Timed steps per configuration, alternating (after one warm-up each)."),
    rows: int = typer.Option(8, min=2, help="Trajectories per batch (an even number: groups of 2)."),
    turns: int = typer.Option(6, min=2, help="Policy turns per trajectory (40 tokens each, 60-token env replies)."),
    hinted_share: float = typer.Option(0.1, min=0.0, max=1.0, help="Share of turns that carry an SDPO hint."),
    pairs: int = typer.Option(4, min=1, help="DPO pairs per batch."),
    json_output: bool = typer.Option(True, "--json/--no-json", help="Print JSON (the only format)."),
) -> None:
    """Step time of plain GRPO vs all three channels on the same batches; target ratio <= 1.35."""
    from trainer_client.train_bench import run_train_bench

    sys.stdout.write(json.dumps(run_train_bench(model, steps, rows, turns, hinted_share, pairs), indent=2) + "\n")


def bench_rollouts(
    env: str = typer.Option(..., "--env", help="Env server: http://host:port or grpc://host:port."),
    model: str = typer.Option("tiny", "--model", help="'tiny', 'smollm2', or a model folder."),
    workers: int = typer.Option(4, min=1, help="Concurrent rollout workers."),
    episodes: int = typer.Option(16, min=1, help="Episodes to play."),
    max_turns: int = typer.Option(4, min=1, help="Turn limit per episode."),
    task_id: list[str] = typer.Option([], "--task-id", help="Tasks to play (repeat); default: sample by seed."),
    json_output: bool = typer.Option(True, "--json/--no-json", help="Print JSON (the only format)."),
) -> None:
    """Episodes per minute the rollout workers sustain against a live env server."""
    from trainer_client.env_client import EnvError
    from trainer_client.train_bench import run_rollout_bench

    try:
        result = run_rollout_bench(env, model, workers, episodes, max_turns, task_id)
    except EnvError as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    from trainer_client.replay import cli as replay_cli

    app.command("train")(train)
    bench_app.command("train")(bench_train)
    bench_app.command("rollouts")(bench_rollouts)
    replay_cli.register(app, bench_app)
