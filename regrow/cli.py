"""The `regrow` command: one subcommand per job; each imports its part only when it runs."""

import logging
import sys
from pathlib import Path

import typer

from regrow.output import console, fail

app = typer.Typer(
    help="Train coding agents with RL on tasks synthesized from your own repositories.", no_args_is_help=True
)
images_app = typer.Typer(help="Build the images regrow runs on (no registry needed).", no_args_is_help=True)
bench_app = typer.Typer(
    help="Benchmarks; each prints its numbers as one JSON object (or --table).", no_args_is_help=True
)
app.add_typer(images_app, name="images")
app.add_typer(bench_app, name="bench")


def _register_parts() -> None:
    """Each part adds its own commands; their heavy imports happen only when a command runs.

    synth, serve, train and ladder are registered here, in regrow/, where the one parser that makes their options
    from their parts' settings may import every part.
    """
    import importlib

    from regrow.settings_commands import register as register_settings_commands

    register_settings_commands(app)
    for part in ("sandbox.cli", "task_synth.cli", "env_server.cli", "trainer_client.cli"):
        try:
            module = importlib.import_module(part)
        except ModuleNotFoundError as error:
            if error.name != part:
                raise
            continue
        module.register(app)
    from regrow.bench.cli import register as register_benchmarks
    from regrow.stack.cli import register as register_stack
    from regrow.tasks_export import register as register_tasks_export
    from task_synth.tasks_cli import tasks_app

    register_tasks_export(tasks_app)
    register_benchmarks(bench_app)
    register_stack(app)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug detail.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request at INFO: a load bench or a trainer polling /health would drown everything else.
    logging.getLogger("httpx").setLevel(logging.DEBUG if verbose else logging.WARNING)


@images_app.command("build")
def images_build(
    force: bool = typer.Option(False, help="Rebuild the base image even when it exists."),
    tasks: Path = typer.Option(
        None, "--tasks", help="Also build the repository images this task store needs, from its wheels."
    ),
) -> None:
    """Build regrow/base from the machine's apt mirror unless it exists; --tasks adds the store's repo images."""
    from proto.task_files import read_records
    from sandbox import DockerBackend, SandboxError
    from sandbox.lifecycle.base_image import BASE_IMAGE, build_base_image
    from task_synth.errors import SynthError
    from task_synth.repository.repo_image import build_store_images

    try:
        backend = DockerBackend()
        with console.status(f"building {BASE_IMAGE} (debootstrap, a few minutes)..."):
            built = build_base_image(backend, BASE_IMAGE, force=force)
        console.print(f"{BASE_IMAGE}: {'built' if built else 'present'}")
        if tasks is not None:
            records = read_records(tasks)
            if not records:
                fail(f"{tasks} holds no tasks.jsonl with tasks: point --tasks at a directory written by `regrow synth`")
            with console.status(f"building the repository images of {tasks}..."):
                for tag, made in build_store_images(backend, records, tasks).items():
                    console.print(f"{tag}: {'built' if made else 'present'}")
    except (SandboxError, SynthError) as error:
        fail(str(error))


_register_parts()
