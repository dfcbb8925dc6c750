"""What `regrow train` and `regrow ladder` do with their settings (regrow/ parses them), plus `regrow replay`."""

import contextlib
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from proto import is_pass
from trainer_client.train.ladder import LadderSettings
from trainer_client.train.settings import TrainSettings
from trainer_client.train.sft import SftSettings

console = Console(stderr=True)
# What `regrow train` imports beyond the core install: the `train` extra (`make up` installs without it).
TRAIN_EXTRA = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "gguf", "tokenizers")


def without_train_extra(error: ModuleNotFoundError) -> str:
    return (
        f"training needs the train extra, and {error.name} is not installed: pip install 'regrow[train]' "
        "(in a checkout, `make setup`)"
    )


class PlainProgress:
    """Progress where the console is no terminal (a log file, a pipe): a timestamped line at once, then at most one
    every `interval_s`, each flushed; a live line or spinner would show nothing there until the run ends."""

    def __init__(self, out: Console, interval_s: float, clock: Callable[[], float] = time.monotonic):
        self.out, self.interval_s, self.clock = out, interval_s, clock
        self._last: float | None = None

    def __call__(self, text: str) -> None:
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            return
        self._last = now
        self.out.print(f"{datetime.now():%H:%M:%S} {text}", markup=False, highlight=False, soft_wrap=True)
        self.out.file.flush()


def train(settings: TrainSettings) -> None:
    """Train with SETTINGS, showing the latest step, and say where the model and its curves went."""
    from pydantic import ValidationError
    from rich.live import Live
    from rich.text import Text

    from trainer_client.env.errors import EnvError
    from trainer_client.rollout.vllm_server import check_vllm_answers

    if settings.plan:
        show_plan(settings)
        return
    try:
        if settings.vllm_server:  # a missing server is said in a second, not after torch has loaded
            check_vllm_answers(settings.vllm_server, settings.vllm_timeout_s)
        from trainer_client.train.placement import process_rank
        from trainer_client.train.run import curves_dir, run_training

        if process_rank()[0] != 0:  # under accelerate launch, the first rank speaks for the run
            run_training(settings)
            return
        if settings.logger == "tensorboard":
            console.print(f"training curves: tensorboard --logdir {curves_dir(settings.output_dir)}")
        starting = "starting: loading the policy and reaching the env"
        if console.is_terminal:
            with Live(Text(starting), console=console) as live:
                summary = run_training(settings, show_progress=lambda progress: live.update(Text(progress.line())))
        else:
            lines = PlainProgress(console, settings.progress_interval_s)
            lines(starting)
            summary = run_training(settings, show_progress=lambda progress: lines(progress.line()))
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in TRAIN_EXTRA:
            raise
        console.print(f"[bold red]error:[/] {escape(without_train_extra(error))}")  # [train] is no markup
        raise typer.Exit(1) from None
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
    """Print the memory plan of SETTINGS per GPU (with --device cpu, on this host); exit 1 when it does not fit."""
    from trainer_client.train.memory_plan import fitted_plan, host_memory_gib, run_shape, shape_of

    try:
        shape = shape_of(settings.model)
    except FileNotFoundError as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    if settings.device == "cpu":  # this host's RAM, in fp32
        run, capacity = run_shape(settings, 1, "none", "cpu"), host_memory_gib()[0]
    else:
        run, capacity = run_shape(settings, settings.plan_gpus, settings.plan_sharding), settings.plan_gpu_gib
    plan = fitted_plan(shape, run, capacity)
    Console(soft_wrap=True).print("\n".join(plan.lines()), markup=False, highlight=False)
    if not plan.fits:
        raise typer.Exit(1)


def ladder(rung: LadderSettings, settings: TrainSettings) -> None:
    """Train and evaluate the four arms of the ladder, then print their table."""
    from pydantic import ValidationError
    from rich.markdown import Markdown

    from trainer_client.env.errors import EnvError
    from trainer_client.train.ladder import run_ladder

    checking = "checking the env, the model and the pairs"
    try:
        if rung.recipe is not None:
            from trainer_client.train.ladder_recipes import recipe_named, recipe_summary, with_recipe

            recipe = recipe_named(rung.recipe)
            settings, rung = with_recipe(recipe, settings, rung)
            console.print(recipe_summary(recipe, settings, rung), markup=False, highlight=False)
            if recipe.launch:
                console.print(f"launched as: {recipe.launch}", markup=False, highlight=False)
        if settings.plan:  # what each arm's training would hold per GPU; nothing is loaded or played
            show_plan(settings)
            return
        with console.status(checking) if console.is_terminal else contextlib.nullcontext() as status:
            show: Callable[[str], None] = (
                status.update if status is not None else PlainProgress(console, settings.progress_interval_s)
            )
            show(checking)
            table = run_ladder(
                settings.model_copy(update={"output_dir": rung.out}),
                rung,
                on_arm=lambda arm: console.print(f"{arm.name}: {'done' if arm.ran else arm.reason}"),
                # the arm in training and its rollouts, live: a step of minutes is no frozen bar
                on_progress=lambda arm, progress: show(f"{arm}: {progress.line()}"),
            )
    except (ValidationError, EnvError, OSError, ValueError, RuntimeError, TimeoutError) as error:
        console.print(f"[bold red]error:[/] {error}")  # OSError: weights missing from a --model folder, say
        raise typer.Exit(1) from None
    Console().print(Markdown(table.markdown()))
    console.print(f"table in {rung.out / 'ladder.md'} and {rung.out / 'ladder.json'}")


def sft(settings: SftSettings) -> None:
    """Fine-tune with SETTINGS and say what was kept and where the model went."""
    try:
        from trainer_client.train.sft import run_sft

        summary = run_sft(settings)
    except (FileNotFoundError, ValueError) as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None
    console.print(
        f"fine-tuned on {summary.kept} episodes ({summary.below_reward} below --min-reward, {summary.too_long} longer "
        f"than --max-length left out); assistant loss {summary.loss_before:.4f} -> {summary.loss_after:.4f}; "
        f"model saved to {summary.final_model}"
    )


def traces_demo(
    tasks: Path = typer.Option(..., "--tasks", help="The task store whose tasks' own solutions are played."),
    env: str = typer.Option("http://127.0.0.1:8000", "--env", help="The env server serving that store."),
    split: str | None = typer.Option(None, "--split", help="Only the tasks of this split."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many tasks, in the store's order."),
    concurrency: int = typer.Option(2, "--concurrency", min=1, help="Episodes played at once."),
) -> None:
    """Play each task's own solution through the env server as an agent would (read, edit, run the tests, submit):
    the server records well-formed tool-call episodes, for `regrow traces export` and `regrow sft`, with no teacher."""
    import asyncio

    from rich.table import Table

    from proto.task_files import read_records
    from trainer_client.rollout.demonstrator import demonstrate

    records = [r for r in read_records(tasks) if split is None or r.split == split][:limit]
    if not records:
        console.print(
            f"[bold red]error:[/] no task in {tasks}{f' of split {split!r}' if split else ''}: synthesize "
            "some with `regrow synth`, or point --tasks at a task store (its tasks.jsonl)"
        )
        raise typer.Exit(1)
    played = asyncio.run(demonstrate(env, records, concurrency))
    table = Table(title=f"regrow traces demo: {len(played)} tasks on {env}")
    for column in ("task", "reward", "steps", "episode"):
        table.add_column(column)
    for demo in played:
        table.add_row(demo.task_id, f"{demo.reward:g}", str(demo.steps), demo.episode_id or f"[red]{demo.error}[/]")
    Console().print(table)
    solved = sum(is_pass(demo.reward) for demo in played)
    console.print(f"{solved} of {len(played)} solutions earned 1.0; export them with `regrow traces export`")
    if solved < len(played):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    from trainer_client.replay import cli as replay_cli

    replay_cli.register(app)
    # `traces` is env_server's group (export); the demonstrator is a client of the server, so it lives here.
    traces = next(group.typer_instance for group in app.registered_groups if group.name == "traces")
    assert traces is not None, "env_server.cli registers the traces group first"
    traces.command("demo")(traces_demo)
