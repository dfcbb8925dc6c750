"""The Docker engine as the stack commands (`regrow stack`, `regrow stack synth`) drive it: the `docker` CLI, the
checks that this engine is a swarm manager and that an image is on this node, and the removal of the sandboxes that
removed servers left."""

from __future__ import annotations

import logging
import subprocess
import time

log = logging.getLogger(__name__)

# The engine refuses to remove a container it is still starting: sandbox removal is retried this long.
SANDBOX_REMOVE_S = 30.0


class StackError(Exception):
    """A step of deploying, removing or reading the stack failed; the message says what to do."""


def docker(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Run the `docker` CLI (the documented interface of `docker stack`) and return its stdout."""
    try:
        done = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise StackError("the `docker` CLI is not on PATH: install Docker's command line client") from None
    except subprocess.TimeoutExpired:
        raise StackError(
            f"`docker {' '.join(args)}` did not finish in {timeout:.0f} s: is the engine overloaded?"
        ) from None
    if done.returncode != 0:
        raise StackError(f"`docker {' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def check_manager() -> None:
    """Stack commands run on a swarm manager."""
    state = docker("info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}").split()
    if not state or state[0] != "active":
        raise StackError("this engine is not in a swarm: run `docker swarm init` (or join one) first")
    if state[1:] != ["true"]:
        raise StackError("this node is a swarm worker: run `regrow stack` on a manager (`docker node ls` lists them)")


def ensure_image(image: str, remedy: str) -> None:
    """Refuse, naming `remedy`, an image that is not on this node."""
    try:
        docker("image", "inspect", "--format", "{{.Id}}", image)
    except StackError:
        raise StackError(
            f"image {image} is not on this node (no registry: each node builds its own): {remedy}"
        ) from None


def remove_sandboxes_of(servers: set[str]) -> int:
    """Remove the sandboxes whose owner was one of these (now removed) server containers: what a server killed past its
    stop grace period could not destroy itself."""
    from sandbox import DockerBackend, SandboxError
    from sandbox.lifecycle.owner import OWNER_CONTAINER_LABEL

    try:
        backend = DockerBackend()
        left = [
            sandbox["Id"]
            for sandbox in backend.managed_containers()
            if (sandbox.get("Labels") or {}).get(OWNER_CONTAINER_LABEL) in servers
        ]
        if left:
            log.info("removing %d sandbox(es) of the stack's servers: %s", len(left), " ".join(c[:12] for c in left))
        deadline = time.monotonic() + SANDBOX_REMOVE_S
        pending = [container for container in left if not backend.remove(container)]
        while pending and time.monotonic() < deadline:
            time.sleep(1)
            pending = [container for container in pending if not backend.remove(container)]
    except SandboxError as error:
        raise StackError(f"could not remove the stack's sandboxes: {error}") from None
    if pending:
        raise StackError(f"{len(pending)} sandbox(es) would not go: `docker rm -f {' '.join(c[:12] for c in pending)}`")
    return len(left)
