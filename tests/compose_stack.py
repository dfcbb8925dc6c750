"""The local stack under test: a compose project of its own (fresh volumes) on free ports, and its leak check."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx

from tests.live_process import free_port

REPO = Path(__file__).parent.parent


class ComposeProject:
    """One compose implementation (v1 `docker-compose` or v2) driving compose.yaml under its own project name."""

    def __init__(self, compose: list[str], project: str, **settings: str):
        self.project = project
        self.argv = [*compose, "-p", project, "-f", str(REPO / "compose.yaml")]
        self.env = {
            **os.environ,
            "REGROW_HTTP_PORT": str(free_port()),
            "REGROW_GRPC_PORT": str(free_port()),
            "DOCKER_GID": str(os.stat("/var/run/docker.sock").st_gid),
            **settings,
        }
        self.url = f"http://127.0.0.1:{self.env['REGROW_HTTP_PORT']}"

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.argv, *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout
        )

    def logs(self, tail: int = 60) -> str:
        return self.run("logs", "--no-color", "--tail", str(tail)).stdout

    def wait_healthy(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not _healthy(self.url):
            assert time.monotonic() < deadline, f"env-server never became healthy:\n{self.logs()}"
            time.sleep(1)

    def leftovers(self, docker_backend) -> list[str]:
        """Containers, networks and volumes of this project, and sandboxes whose owning container is gone."""
        api = docker_backend.api
        left = [
            f"container {c['Names']}"
            for c in api.containers(all=True, filters={"label": f"com.docker.compose.project={self.project}"})
        ]
        for sandbox in docker_backend.managed_containers():
            owner = (sandbox.get("Labels") or {}).get("regrow.owner.container")
            if owner and not docker_backend.container_running(owner):
                left.append(f"sandbox {sandbox['Id'][:12]}")
        left += [f"network {n['Name']}" for n in api.networks() if n["Name"].startswith(self.project)]
        left += [
            f"volume {v['Name']}" for v in api.volumes().get("Volumes") or [] if v["Name"].startswith(self.project)
        ]
        return left


def output_tail(result: subprocess.CompletedProcess, chars: int = 4000) -> str:
    """The end of a command's output: compose v2 prints its build log, pip's errors included, on stdout, and the
    verdict on stderr."""
    free_gib = shutil.disk_usage(REPO).free / 2**30
    return (
        f"{result.stdout[-chars:]}\n{result.stderr[-chars:]}\n(free disk where the repository lives: {free_gib:.1f} "
        "GiB)"
    )


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False
