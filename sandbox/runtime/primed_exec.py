"""A command's process started ahead: the engine's exec start (most of a short command's time: runc joins the
container's namespaces and cgroups) is paid while the container waits in a pool, and a step sends its command to a
process already running. The runner reads one request from its stdin, says it took it, and becomes the exec entry
(process_sweep) with the command's directory and environment: from then on the exec is the one a plain start would
have made, its stream, exit code, marker and sweep alike. A runner that died unfed (a reclaim, `kill -9 -1`) says
nothing, and the command runs through a plain start instead."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

import docker

from sandbox.runtime.exec_stream import FedExec, StreamResult
from sandbox.runtime.inside.primed_runner import TOOK

log = logging.getLogger(__name__)

_RUNNER_SOURCE = Path(__file__).with_name("inside") / "primed_runner.py"


@functools.cache
def _runner_source() -> str:
    return _RUNNER_SOURCE.read_text()


class PrimedRunner:
    """A started exec, as `user` and with `marker` in its environment, that waits for one command."""

    def __init__(self, api: docker.APIClient, container_id: str, user: str, marker: str):
        self.user, self.marker = user, marker
        self.exec_id = api.exec_create(
            container_id,
            ["python3", "-c", _runner_source()],
            user=user,
            environment=[marker, "PYTHONCOERCECLOCALE=0"],
            stdin=True,
        )["Id"]
        self._exec = FedExec(api, self.exec_id)

    def run(
        self, argv: list[str], cwd: str | None, env: dict[str, str], deadline: float, cap: int
    ) -> StreamResult | None:
        """The command's stream, read until it ends or `deadline` (monotonic); None when the runner had died and the
        command did not run."""
        request = json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode() + b"\n"
        try:
            stream = self._exec.feed(request, deadline, cap + len(TOOK))
        except OSError as error:
            log.info("a primed runner's stream broke before its command: %s", error)
            return None
        if not stream.stdout.startswith(TOOK):
            # Nothing at all by the deadline: the runner may yet take it (stopped, say), so it is this command's
            # timeout, and the marker's sweep ends the runner; an early end with nothing is a runner that had died.
            return stream if stream.deadline_hit else None
        return StreamResult(
            stream.stdout[len(TOOK) :][:cap],
            stream.stderr[:cap],
            stream.stdout_total - len(TOOK),
            stream.stderr_total,
            stream.deadline_hit,
        )

    def close(self) -> None:
        """End it unfed: the runner reads the end of its input and exits."""
        self._exec.close()
