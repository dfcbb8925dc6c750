"""The sandbox's commands: `regrow sandbox proxy` and `regrow bench proxy`."""

from __future__ import annotations

import json
import sys

import typer
from rich.console import Console

console = Console(stderr=True)
sandbox_app = typer.Typer(help="Sandbox infrastructure.", no_args_is_help=True)


@sandbox_app.command("proxy")
def proxy(
    listen: str = typer.Option(
        None, help="tcp://HOST:PORT or unix:///PATH (default: REGROW_PROXY_LISTEN, else tcp://127.0.0.1:2375)."
    ),
    engine: str = typer.Option(
        None, help="The engine's socket (default: REGROW_PROXY_ENGINE, else unix:///var/run/docker.sock)."
    ),
) -> None:
    """Serve the Docker API to the env server with only the endpoints regrow uses; refuse the rest (403)."""
    import asyncio

    from sandbox.docker_proxy import ProxySettings, serve

    try:
        asyncio.run(
            serve(ProxySettings(**{k: v for k, v in {"listen": listen, "engine": engine}.items() if v is not None}))
        )
    except (ValueError, OSError) as error:  # a bad setting, or the address is taken
        console.print(f"[bold red]error:[/] cannot start the docker proxy: {error}")
        raise typer.Exit(1) from None


def bench_proxy(repetitions: int = typer.Option(30, min=5, help="Repetitions of each measurement.")) -> None:
    """Sandbox exec and create+destroy p50/p95 in ms, straight to the engine and through `regrow sandbox proxy`."""
    from sandbox import SandboxError
    from sandbox.bench import run_proxy_bench

    try:
        sys.stdout.write(json.dumps(run_proxy_bench(repetitions), indent=2) + "\n")
    except SandboxError as error:
        console.print(f"[bold red]error:[/] {error}")
        raise typer.Exit(1) from None


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
    bench_app.command("proxy")(bench_proxy)
