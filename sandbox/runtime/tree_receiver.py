"""A tar receiver started ahead in a container: a later import streams its bytes to a `tar -x` that already waits,
instead of asking the engine to unpack them (put_archive: tens of milliseconds on a slow storage driver, paid while a
reset's first step waits). One receiver takes one archive; a warm container readied for a reset, or later for a fork
at step k, primes one."""

from __future__ import annotations

import io
import tarfile
import time

import docker

from sandbox.layout import AGENT_UID
from sandbox.runtime.exec_stream import FedExec

_EXIT_MARKER = "REGROW_TAR_EXIT="
# -p keeps each member's mode (not the umask's); as a non-root user tar writes every file as that user.
_RECEIVE = f'tar -x -p -f - -C "$1" 2>&1; echo "{_EXIT_MARKER}$?"'
_OUTPUT_CAP = 64 * 1024


def agent_owned(archive: bytes) -> bool:
    """Whether every member of the tar belongs to the agent: what a receiver running as the agent writes exactly
    (the engine's put_archive would give another owner its own)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            return all(member.uid == AGENT_UID and member.gid == AGENT_UID for member in tar)
    except tarfile.TarError:
        return False


class TreeReceiver:
    """`tar -x` into `path`, started now as `user`, fed later by `receive`; `close` ends it unfed."""

    def __init__(self, api: docker.APIClient, container_id: str, path: str, user: str):
        self.path = path
        exec_id = api.exec_create(
            container_id, ["sh", "-c", _RECEIVE, "sh", path], user=user, stdin=True, stdout=True, stderr=True
        )["Id"]
        self._exec = FedExec(api, exec_id)

    def receive(self, archive: bytes, timeout: float) -> str | None:
        """Unpack `archive` through the waiting tar; None when it did, else what went wrong (the caller falls back to
        the engine's own unpacking, which overwrites whatever part this wrote)."""
        try:
            stream = self._exec.feed(archive, time.monotonic() + timeout, _OUTPUT_CAP)
        except OSError as error:
            return f"the receiver's stream broke: {error}"
        output = (stream.stdout + stream.stderr).decode(errors="replace")
        if stream.deadline_hit:
            return f"tar did not finish within {timeout:.0f}s"
        head, _, code = output.rpartition(_EXIT_MARKER)
        if code.strip() != "0":
            return f"tar exited {code.strip() or 'without a code'}: {head.strip()[-300:]}"
        return None

    def close(self) -> None:
        """End it unfed: tar reads the end of its input at once and exits."""
        self._exec.close()
