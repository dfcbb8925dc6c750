"""A container that runs Harbor itself, for the tests of the Harbor export: harbor 0.26 needs Python 3.12 or newer
and this machine has 3.11, so the runner is Debian trixie (Python 3.13) debootstrapped from the machine's own apt
mirror, with the Docker CLI and Compose, and Harbor from the host-built wheelhouse (`make wheelhouse-harbor`)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import tempfile
from pathlib import Path

from sandbox.lifecycle.base_image import _root_command, find_apt_mirror  # root, as the base image is built

HARBOR = "harbor==0.26.0"
RUNNER_IMAGE = "regrow/harbor-runner:0.26.0-r1"
WHEELHOUSE = Path(__file__).parents[1] / ".cache" / "wheelhouse-harbor"
PACKAGES = ("python3", "python3-venv", "docker-cli", "docker-compose", "git", "ca-certificates", "bash")
DOCKERFILE = f"""FROM regrow/harbor-runner-base:trixie
COPY wheels /wheels
RUN python3 -m venv /opt/harbor && /opt/harbor/bin/pip install -q --no-index --find-links /wheels '{HARBOR}' \\
    && rm -rf /wheels
ENV HARBOR_TELEMETRY=0
"""


def build_runner(client) -> str:
    """The runner image, built when missing; the wheelhouse must be there (make test builds it)."""
    if client.images.list(name=RUNNER_IMAGE):
        return RUNNER_IMAGE
    if not any(WHEELHOUSE.glob("harbor-*.whl")):
        raise RuntimeError(f"no Harbor wheels in {WHEELHOUSE}: run `make wheelhouse-harbor`")
    if not client.images.list(name="regrow/harbor-runner-base:trixie"):
        mirror = find_apt_mirror().uri
        with tempfile.TemporaryDirectory(prefix="regrow-harbor-runner-") as work:
            rootfs = Path(work) / "rootfs"
            command = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", "trixie", str(rootfs)]
            try:
                subprocess.run(_root_command([*command, mirror]), check=True, capture_output=True)
                tar = ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."]
                archive = subprocess.run(_root_command(tar), check=True, capture_output=True).stdout
                client.api.import_image_from_data(
                    archive, repository="regrow/harbor-runner-base", tag="trixie", changes=['CMD ["/bin/bash"]']
                )
            finally:  # debootstrap's files are root's
                subprocess.run(_root_command(["rm", "-rf", "--one-file-system", str(rootfs)]), capture_output=True)
    with tempfile.TemporaryDirectory(prefix="regrow-harbor-context-") as context:
        (Path(context) / "Dockerfile").write_text(DOCKERFILE)
        subprocess.run(["cp", "-r", str(WHEELHOUSE), str(Path(context) / "wheels")], check=True)
        client.images.build(path=context, tag=RUNNER_IMAGE, network_mode="none", rm=True)
    return RUNNER_IMAGE


def _tar_of(folder: Path, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=name)
    return buffer.getvalue()


def harbor_trial(client, task_dir: Path, agent: str) -> dict:
    """`harbor trial start` of `task_dir` with `agent` on the host's engine; its result.json."""
    container = client.containers.run(
        build_runner(client),
        ["sleep", "infinity"],
        detach=True,
        volumes={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}},
        labels={"regrow.test": "harbor-runner"},
    )
    try:
        container.put_archive("/", _tar_of(task_dir, "task"))
        run = container.exec_run(
            [
                "/opt/harbor/bin/harbor",
                "trial",
                "start",
                "-p",
                "/task",
                "-a",
                agent,
                "-e",
                "docker",
                "--trials-dir",
                "/trials",
            ],
            workdir="/tmp",
        )
        found = container.exec_run(["sh", "-c", "cat /trials/*/result.json"])
        if found.exit_code != 0:
            raise RuntimeError(f"harbor wrote no result.json:\n{run.output.decode()[-3000:]}")
        return json.loads(found.output)
    finally:
        container.remove(force=True)


if __name__ == "__main__":  # `make harbor-runner`: built during `make test`'s set-up, beside the other images
    import docker

    print(build_runner(docker.from_env()))
