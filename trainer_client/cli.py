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

    if settings.plan:
        show_plan(settings)
        return
    try:
        if settings.vllm_server:  # a missing server is said in a second, not after torch has loaded
            check_vllm_answers(settings.vllm_server, settings.vllm_timeout_s)
        from trainer_client.train.run import curves_dir, process_rank, run_training

        if process_rank()[0] != 0:  # under accelerate launch, the first rank speaks for the run
            run_training(settings)
            return
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


def show_plan(settings: TrainSettings) -> None:
    """Print the memory plan of SETTINGS per GPU; exit 1 when it does not fit."""
    from trainer_client.train.memory_plan import plan_memory, run_shape, shape_of

    try:
        shape = shape_of(settings.model)
    except FileNotFoundError as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    plan = plan_memory(shape, run_shape(settings, settings.plan_gpus, settings.plan_sharding), settings.plan_gpu_gib)
    Console(soft_wrap=True).print("\n".join(plan.lines()), markup=False, highlight=False)
    if not plan.fits:
        raise typer.Exit(1)


def ladder(rung: LadderSettings, settings: TrainSettings) -> None:
    """Train and evaluate the four arms of the ladder, then print their table."""
    from pydantic import ValidationError
    from rich.markdown import Markdown

    from trainer_client.env.client import EnvError
    from trainer_client.train.ladder import run_ladder

    try:
        with console.status("checking the env, the model and the pairs") as status:
            table = run_ladder(
                settings.model_copy(update={"output_dir": rung.out}),
                rung,
                on_arm=lambda arm: console.print(f"{arm.name}: {'done' if arm.ran else arm.reason}"),
                # the arm in training and its rollouts, live: a step of minutes is no frozen bar
                on_progress=lambda arm, progress: status.update(f"{arm}: {progress.line()}"),
            )
    except (ValidationError, EnvError, FileNotFoundError, ValueError, RuntimeError, TimeoutError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    Console().print(Markdown(table.markdown()))
    console.print(f"table in {rung.out / 'ladder.md'} and {rung.out / 'ladder.json'}")


def register(app: typer.Typer) -> None:
    from trainer_client.replay import cli as replay_cli

    replay_cli.register(app)
