"""`regrow stack`: the env server on every node of a Docker Swarm, deploy/swarm.yaml over the `docker stack` CLI."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import typer

from regrow.output import console, fail
from regrow.stack.swarm import StackError, check_manager, docker, ensure_image, remove_sandboxes_of

stack_app = typer.Typer(help="Serve on many Docker hosts: the stack of deploy/swarm.yaml.", no_args_is_help=True)

STACK_FILE = Path(__file__).resolve().parents[2] / "deploy" / "swarm.yaml"
APP_IMAGE = "regrow/app:0.1.0"
NAMESPACE_LABEL = "com.docker.stack.namespace"
POLL_S = 2.0


@dataclass(frozen=True)
class Node:
    """A swarm node that runs the global services: its hostname and the address its published ports answer on."""

    hostname: str
    address: str


def active_nodes() -> list[Node]:
    """The ready, active nodes, where a global service runs one task each."""
    ids = docker("node", "ls", "--format", "{{.ID}}").split()
    nodes = []
    for spec in json.loads(docker("node", "inspect", *ids)) if ids else []:
        if spec["Status"].get("State") != "ready" or spec["Spec"].get("Availability") != "active":
            continue
        address = spec["Status"].get("Addr", "")
        if address in ("", "0.0.0.0"):  # a manager may report 0.0.0.0; its manager address names the host
            address = (spec.get("ManagerStatus") or {}).get("Addr", "").rsplit(":", 1)[0]
        nodes.append(Node(hostname=spec["Description"]["Hostname"], address=address))
    return nodes


def node_url(node: Node, port: int) -> str:
    host = f"[{node.address}]" if ":" in node.address else node.address
    return f"http://{host}:{port}"


def check_task_store(tasks: Path) -> list[str]:
    """The store's records exist and the images they name are on this node; returns those images."""
    from proto.task_files import read_records

    records = read_records(tasks)
    if not records:
        raise StackError(f"{tasks} holds no tasks.jsonl with tasks: point --tasks at a store written by `regrow synth`")
    images = sorted({record.image for record in records})
    for image in images:
        ensure_image(image, f"run `regrow images build --tasks {tasks}` on every node")
    return images


def deploy_stack(name: str, stack_file: Path, tasks: Path, http_port: int, grpc_port: int, image: str) -> None:
    """`docker stack deploy` with the variables deploy/swarm.yaml reads; local images, no registry lookup."""
    env = {
        **os.environ,
        "REGROW_TASKS_DIR": str(tasks),
        "REGROW_HTTP_PORT": str(http_port),
        "REGROW_GRPC_PORT": str(grpc_port),
        "REGROW_APP_IMAGE": image,
    }
    env.setdefault("DOCKER_GID", str(os.stat("/var/run/docker.sock").st_gid))
    docker("stack", "deploy", "--compose-file", str(stack_file), "--resolve-image", "never", name, env=env, timeout=300)


def unhealthy_nodes(nodes: list[Node], port: int) -> list[Node]:
    """The nodes whose env server does not yet answer /health with 200."""
    waiting = []
    for node in nodes:
        try:
            healthy = httpx.get(f"{node_url(node, port)}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            healthy = False
        if not healthy:
            waiting.append(node)
    return waiting


def wait_healthy(name: str, port: int, timeout_s: float) -> list[Node]:
    deadline = time.monotonic() + timeout_s
    nodes = active_nodes()
    while waiting := unhealthy_nodes(nodes, port):
        if time.monotonic() > deadline:
            names = ", ".join(f"{node.hostname} ({node_url(node, port)})" for node in waiting)
            raise StackError(
                f"no healthy env server after {timeout_s:.0f} s on {names}: "
                f"see `docker service ps --no-trunc {name}_env-server` and `docker service logs {name}_env-server`"
            )
        time.sleep(POLL_S)
    return nodes


def stack_ids(kind: str, name: str) -> set[str]:
    """Ids of the stack's objects of one kind (service, container, network, volume) on this node."""
    listing = {
        "service": ["service", "ls", "-q"],
        "container": ["ps", "-aq", "--no-trunc"],
        "network": ["network", "ls", "-q"],
        "volume": ["volume", "ls", "-q"],
    }[kind]
    return set(docker(*listing, "--filter", f"label={NAMESPACE_LABEL}={name}").split())


def remove_stack(name: str, volumes: bool, timeout_s: float) -> int:
    """`docker stack rm`, then wait until its services, containers and networks are gone, and remove the sandboxes
    its servers left; returns how many sandboxes that was."""
    servers = stack_ids("container", name)
    docker("stack", "rm", name, timeout=300)
    deadline = time.monotonic() + timeout_s
    while left := {kind: ids for kind in ("service", "container", "network") if (ids := stack_ids(kind, name))}:
        servers |= left.get("container", set())
        if time.monotonic() > deadline:
            counts = ", ".join(f"{len(ids)} {kind}(s)" for kind, ids in left.items())
            raise StackError(
                f"stack {name} still has {counts} after {timeout_s:.0f} s: run `docker stack rm {name}` again"
            )
        time.sleep(POLL_S)
    reaped = remove_sandboxes_of(servers)
    if volumes:
        remove_volumes(name, deadline)
    return reaped


def remove_volumes(name: str, deadline: float) -> None:
    while volumes := stack_ids("volume", name):
        try:
            docker("volume", "rm", *sorted(volumes))
        except StackError as error:  # a container that just exited may still hold a volume for a moment
            if time.monotonic() > deadline:
                raise StackError(f"the volumes of stack {name} stayed: {error}") from None
            time.sleep(POLL_S)


def gather_traces(urls: list[str], token: str | None, page: int = 1000) -> Iterator[str]:
    """Every recorded episode of every server, with its steps, as EpisodeTrace JSON lines (each episode once)."""
    from proto.traces import EpisodeTrace

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    seen: set[str] = set()
    for url in urls:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            offset = 0
            while True:
                listed = _get_json(http, "/episodes", {"limit": page, "offset": offset})
                for summary in listed:
                    episode_id = summary["episode_id"]
                    if episode_id not in seen:
                        seen.add(episode_id)
                        yield EpisodeTrace.model_validate(_get_json(http, f"/episodes/{episode_id}")).model_dump_json()
                if len(listed) < page:
                    break
                offset += page


def _get_json(http: httpx.Client, path: str, params: dict | None = None):
    try:
        response = http.get(path, params=params)
    except httpx.HTTPError as error:
        raise StackError(f"GET {http.base_url}{path} failed: {error}: is that node's env server up?") from None
    if response.status_code == 401:
        raise StackError(f"{http.base_url} wants a token: pass --token or set REGROW_SERVER_API_TOKEN")
    if response.status_code != 200:
        raise StackError(f"GET {http.base_url}{path} answered {response.status_code}: {response.text[:200]}")
    return response.json()


@stack_app.command("deploy")
def deploy(
    tasks: Path = typer.Option(
        ..., "--tasks", exists=True, file_okay=False, help="Task store; the same absolute path on every node."
    ),
    name: str = typer.Option("regrow", "--name", help="Stack name."),
    http_port: int = typer.Option(8000, "--http-port", help="HTTP/WebSocket port published on every node."),
    grpc_port: int = typer.Option(50051, "--grpc-port", help="gRPC port published on every node."),
    stack_file: Path = typer.Option(STACK_FILE, "--file", exists=True, dir_okay=False, help="The stack file."),
    image: str = typer.Option(APP_IMAGE, "--image", help="Service image, built on every node (`make up` builds it)."),
    timeout: float = typer.Option(600, "--timeout", help="Seconds to wait for every node's /health."),
) -> None:
    """`docker stack deploy` of deploy/swarm.yaml: checks the store and images, then waits for every node's server."""
    try:
        check_manager()
        store = tasks.resolve()
        ensure_image(image, "run `make up` or `make app-image` on every node")
        images = check_task_store(store)
        deploy_stack(name, stack_file, store, http_port, grpc_port, image)
        console.print(f"deployed stack {name} (task store {store}, repo images {', '.join(images)})")
        with console.status("waiting for every node's env server..."):
            nodes = wait_healthy(name, http_port, timeout)
    except StackError as error:
        fail(str(error))
    for node in nodes:
        console.print(f"{node.hostname}: {node_url(node, http_port)} healthy")


@stack_app.command("rm")
def rm(
    name: str = typer.Option("regrow", "--name", help="Stack name."),
    volumes: bool = typer.Option(False, "--volumes", help="Also remove the stack's volumes (traces included)."),
    timeout: float = typer.Option(300, "--timeout", help="Seconds to wait for everything to go."),
) -> None:
    """`docker stack rm`, and wait until its containers and networks are gone and no sandbox of it is left."""
    try:
        check_manager()
        with console.status(f"removing stack {name}..."):
            reaped = remove_stack(name, volumes, timeout)
    except StackError as error:
        fail(str(error))
    console.print(f"removed stack {name}" + (f" and {reaped} sandbox(es) its servers left" if reaped else ""))


@stack_app.command("traces")
def traces(
    out: Path = typer.Option(..., "--out", help="JSONL file, one EpisodeTrace a line (as `regrow traces export`)."),
    port: int = typer.Option(8000, "--http-port", help="The port the stack publishes."),
    urls: list[str] = typer.Option(None, "--url", help="Servers to read instead of the swarm's nodes (repeatable)."),
    token: str = typer.Option(None, "--token", envvar="REGROW_SERVER_API_TOKEN", help="Bearer token of /episodes."),
) -> None:
    """Gather every node's recorded episodes over HTTP into one JSONL file."""
    try:
        if not urls:
            check_manager()
            urls = [node_url(node, port) for node in active_nodes()]
        count = 0
        with console.status(f"reading episodes from {len(urls)} server(s)..."), out.open("w", encoding="utf-8") as sink:
            for line in gather_traces(urls, token or None):
                sink.write(line + "\n")
                count += 1
    except StackError as error:
        fail(str(error))
    console.print(f"wrote {count} episodes from {len(urls)} server(s) to {out}")


def register(app: typer.Typer) -> None:
    from regrow.settings_commands import PASS_THROUGH
    from regrow.stack.synth_jobs import synth_command

    stack_app.command("synth", context_settings=PASS_THROUGH, add_help_option=False)(synth_command)
    app.add_typer(stack_app, name="stack")
