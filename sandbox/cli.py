"""The sandbox's commands: `regrow sandbox proxy` and `regrow bench proxy`."""

from __future__ import annotations

from typing import Any

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

    from sandbox.proxy.server import ProxySettings, serve

    given: dict[str, Any] = {k: v for k, v in {"listen": listen, "engine": engine}.items() if v is not None}
    try:
        asyncio.run(serve(ProxySettings(**given)))
    except (ValueError, OSError) as error:  # a bad setting, or the address is taken
        console.print(f"[bold red]error:[/] cannot start the docker proxy: {error}")
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.add_typer(sandbox_app, name="sandbox")
