"""What `regrow train` and `regrow ladder` do with their settings (regrow/ parses them), plus `regrow replay`."""

import typer
from rich.console import Console

from trainer_client.train.ladder import LadderSettings
from trainer_client.train.settings import TrainSettings

console = Console(stderr=True)


def train(settings: TrainSettings) -> None:
    """Train with SETTINGS, showing the latest step, and say where the model and its curves went."""
    from pydantic import ValidationError
    from rich.live import Live
    from rich.text import Text

    from trainer_client.env.client import EnvError
    from trainer_client.rollout.vllm_sampler import check_vllm_answers

    try:
        if settings.vllm_server:  # a missing server is said in a second, not after torch has loaded
            check_vllm_answers(settings.vllm_server, settings.vllm_timeout_s)
        from trainer_client.train.run import curves_dir, run_training

        if settings.logger == "tensorboard":
            console.print(f"training curves: tensorboard --logdir {curves_dir(settings.output_dir)}")
        with Live(Text("starting: loading the policy and reaching the env"), console=console) as live:
            summary = run_training(settings, show_progress=lambda progress: live.update(Text(progress.line())))
    except (ValidationError, EnvError, FileNotFoundError, ValueError, RuntimeError, TimeoutError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    console.print(
        f"trained {summary.steps} steps on {summary.episodes} episodes "
        f"({summary.groups_dropped_stale} stale groups dropped, {summary.episode_retries} episodes replayed, "
        f"{summary.groups_dropped_lost} groups dropped after lost episodes); "
        f"model saved to {summary.final_model}"
    )
    if summary.log_history:
        console.print({k: round(v, 5) if isinstance(v, float) else v for k, v in summary.log_history[-1].items()})


def ladder(rung: LadderSettings, settings: TrainSettings) -> None:
    """Train and evaluate the four arms of the ladder, then print their table."""
    from pydantic import ValidationError
    from rich.markdown import Markdown

    from trainer_client.env.client import EnvError
    from trainer_client.train.ladder import run_ladder

    try:
        with console.status("training and evaluating the arms (see the log for progress)..."):
            table = run_ladder(
                settings.model_copy(update={"output_dir": rung.out}),
                rung,
                on_arm=lambda arm: console.print(f"{arm.name}: {'done' if arm.ran else arm.reason}"),
            )
    except (ValidationError, EnvError, FileNotFoundError, ValueError, RuntimeError, TimeoutError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    Console().print(Markdown(table.markdown()))
    console.print(f"table in {rung.out / 'ladder.md'} and {rung.out / 'ladder.json'}")


def register(app: typer.Typer) -> None:
    from trainer_client.replay import cli as replay_cli

    replay_cli.register(app)
