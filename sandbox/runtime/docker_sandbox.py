"""The Docker sandbox: one hardened container, commands under hard timeouts, tar-based file I/O."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping

import docker
import docker.errors
import requests.exceptions

from sandbox.errors import SandboxGone
from sandbox.limits import Limits
from sandbox.runtime import docker_files
from sandbox.runtime.exec_stream import StreamResult, read_exec_stream
from sandbox.runtime.primed_exec import PrimedRunner
from sandbox.runtime.process_sweep import entry_command, entry_could_not_fork, split_reclaimed, sweep_command
from sandbox.runtime.sandbox_protocol import DirEntry, ExecResult
from sandbox.runtime.tree_receiver import TreeReceiver, agent_owned

log = logging.getLogger(__name__)

KILL_GRACE_S = 2.0
# Beyond timeout + kill grace, the host stops waiting and kills the command's processes itself.
OUTER_GRACE_S = 5.0
# A reclaim runs before the command's own timeout starts (stop_then_kill: a 5 s budget, 2 s to reap, python's start);
# on a host loaded 15 to 2 cores, a 10 s allowance was spent before the command ran. The command's own timeout holds.
RECLAIM_ALLOWANCE_S = 30.0
EXEC_MARKER = "REGROW_EXEC"
EXIT_CODE_WAIT_S = 15.0
EXIT_CODE_POLL_S = 0.1  # the longest pause between polls
SWEEP_ATTEMPTS = 5
START_ATTEMPTS = 5
SWEEP_TIMEOUT_S = 30.0
OOM_CHECK_TIMEOUT_S = 30.0
RECEIVE_TIMEOUT_S = 60.0  # a primed import's, before the engine unpacks it instead
_OOM_COUNT = "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"


def _gone_or_raise(error: docker.errors.APIError, container_id: str) -> Exception:
    status = getattr(error.response, "status_code", None)
    if isinstance(error, docker.errors.NotFound) or status in (404, 409):
        return SandboxGone(
            f"sandbox container {container_id[:12]} is gone ({error.explanation or error}); start a new sandbox"
        )
    return error


def _environment(env: Mapping[str, str]) -> list[str]:
    """`env` as the engine takes it, each NAME=value checked."""
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ValueError(f"invalid environment variable {key!r}: names need no '=' and no NUL")
    return [f"{key}={value}" for key, value in env.items()]


class DockerSandbox:
    """One running container, the `Sandbox` of a Docker engine; `remove` is the backend's, which tracks it."""

    def __init__(
        self, api: docker.APIClient, container_id: str, limits: Limits, user: str, remove: Callable[[str], object]
    ):
        self.api = api
        self.id = container_id
        self.limits = limits
        self.user = user
        self._remove = remove
        self._oom_seen = 0
        self._closed = False
        self._receiver: TreeReceiver | None = None
        self._runner: PrimedRunner | None = None

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def exec(
        self,
        command: str | list[str],
        timeout: float = 30.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run `command` (a shell string, or argv) under `timeout -k` in its own process group, through the exec entry
        (process_sweep): what it leaves in its group ends with it, and a spent pids limit is reclaimed before it."""
        if not 0 < timeout <= 24 * 3600:
            raise ValueError(f"timeout must be in (0, 86400] seconds, got {timeout}")
        argv = command if isinstance(command, list) else ["sh", "-c", command]
        runner = self._take_runner(user or self.user)
        marker = runner.marker if runner else f"{EXEC_MARKER}={uuid.uuid4().hex}"
        environment = [marker, *_environment(env or {})]
        started, reclaim, reclaimed = time.monotonic(), False, 0
        for attempt in range(START_ATTEMPTS):
            wrapped = entry_command(argv, timeout, KILL_GRACE_S, reclaim=reclaim)
            primed = self._run_primed(runner, wrapped, cwd, env or {}, started + timeout) if runner else None
            runner = None  # one command a runner; a retry starts plainly
            exec_id, stream = primed or self._start_and_read(
                wrapped, user or self.user, cwd, environment, started + timeout
            )
            exit_code = self._exit_code(exec_id, stream.deadline_hit)
            stderr, killed = split_reclaimed(stream.stderr)
            reclaimed += killed
            # Either the engine or the entry could not fork the command into the container: its pids limit is spent
            # by what earlier commands left, so the command never ran and runs again, after a reclaim.
            if entry_could_not_fork(exit_code, stderr):
                reclaim = True
            elif exit_code != 126 or not self._never_started(exec_id):
                break
            log.info(
                "exec %d in %s did not start: %s", attempt + 1, self.id[:12], (stream.stdout + stream.stderr)[-200:]
            )
            time.sleep(0.2 * attempt)
        duration = time.monotonic() - started
        timed_out = stream.deadline_hit or (exit_code in (124, 137) and duration >= timeout)
        if timed_out:
            self._sweep(marker, user or self.user)
        oom = exit_code == 137 and not timed_out and self._oom_killed_since_last_check()
        if reclaimed:
            log.warning("the pids limit of %s was spent: %d left-over processes were killed", self.id[:12], reclaimed)
        return ExecResult(
            exit_code=exit_code,
            stdout=stream.stdout.decode("utf-8", errors="replace"),
            stderr=stderr.decode("utf-8", errors="replace"),
            timed_out=timed_out,
            truncated=stream.truncated,
            duration_s=duration,
            oom_killed=oom,
            reclaimed=reclaimed,
        )

    def _start_and_read(
        self, wrapped: list[str], user: str, cwd: str | None, environment: list[str], timeout_at: float
    ) -> tuple[str, StreamResult]:
        try:
            exec_id = self.api.exec_create(
                self.id, wrapped, user=user, workdir=cwd, environment=environment, stdin=False, tty=False
            )["Id"]
            sock = self.api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as error:
            raise _gone_or_raise(error, self.id) from error
        try:
            return exec_id, read_exec_stream(
                sock, timeout_at + KILL_GRACE_S + OUTER_GRACE_S + RECLAIM_ALLOWANCE_S, self.limits.output_cap_bytes
            )
        finally:
            sock.close()

    def prime_exec(self) -> None:
        """Start the next command's process now, as the sandbox's user, so that its exec costs no engine start (a
        warm container readied for a reset's first step); it waits until a command comes or the sandbox goes."""
        if self._runner is not None:
            self._runner.close()
        try:
            self._runner = PrimedRunner(self.api, self.id, self.user, f"{EXEC_MARKER}={uuid.uuid4().hex}")
        except docker.errors.APIError as error:
            raise _gone_or_raise(error, self.id) from error

    def _take_runner(self, user: str) -> PrimedRunner | None:
        runner, self._runner = self._runner, None
        if runner is not None and runner.user != user:
            self._runner = runner  # kept for a command as the sandbox's user
            return None
        return runner

    def _run_primed(
        self, runner: PrimedRunner, wrapped: list[str], cwd: str | None, env: Mapping[str, str], timeout_at: float
    ) -> tuple[str, StreamResult] | None:
        deadline = timeout_at + KILL_GRACE_S + OUTER_GRACE_S + RECLAIM_ALLOWANCE_S
        stream = runner.run(wrapped, cwd, dict(env), deadline, self.limits.output_cap_bytes)
        if stream is None:
            log.info("the primed runner of %s had ended; the command starts plainly", self.id[:12])
            return None
        return runner.exec_id, stream

    def _never_started(self, exec_id: str) -> bool:
        """Whether the engine failed to start the exec's process at all (it reports 126 and no pid then)."""
        try:
            info = self.api.exec_inspect(exec_id)
        except docker.errors.APIError as error:
            raise _gone_or_raise(error, self.id) from error
        return not info.get("Pid")

    def _exit_code(self, exec_id: str, deadline_hit: bool) -> int:
        """The exit code of a finished exec; -1 when the engine still reports it running after EXIT_CODE_WAIT_S."""
        if deadline_hit:
            return 124
        # A loaded engine reports an exec whose stream has ended as running for seconds.
        give_up, pause = time.monotonic() + EXIT_CODE_WAIT_S, 0.01
        while True:
            try:
                info = self.api.exec_inspect(exec_id)
            except docker.errors.APIError as error:
                raise _gone_or_raise(error, self.id) from error
            if not info.get("Running"):
                if info.get("ExitCode") is not None:
                    return int(info["ExitCode"])
                self.ensure_running()  # stopped without a code: its container may have died under it
            if time.monotonic() >= give_up:
                break
            time.sleep(pause)
            pause = min(2 * pause, EXIT_CODE_POLL_S)
        self.ensure_running()
        log.warning(
            "exec %s in %s still running %.0fs after its output ended; reporting exit code -1",
            exec_id[:12],
            self.id[:12],
            EXIT_CODE_WAIT_S,
        )
        return -1

    def _output(self, exec_id: str, timeout: float) -> bytes:
        """Start a created exec and return its stdout and stderr; read as `exec` reads them, since docker-py's own
        reading loses what arrived with the reply's headers (docker-py issue #3332)."""
        sock = self.api.exec_start(exec_id, socket=True)
        try:
            stream = read_exec_stream(sock, time.monotonic() + timeout, self.limits.output_cap_bytes)
        finally:
            sock.close()
        return stream.stdout + stream.stderr

    def _sweep(self, marker: str, user: str) -> None:
        # As the command's own user: with every capability dropped, root cannot signal other uids.
        # Retried: while a fork bomb holds every pid of the container, the sweep itself may fail to start.
        for attempt in range(SWEEP_ATTEMPTS):
            try:
                exec_id = self.api.exec_create(self.id, sweep_command(marker), user=user)["Id"]
                output = self._output(exec_id, SWEEP_TIMEOUT_S)
                exit_code = self._exit_code(exec_id, deadline_hit=False)
            except (docker.errors.APIError, SandboxGone) as error:
                log.warning("could not sweep timed-out processes in %s: %s", self.id[:12], error)
                return
            if exit_code == 0:
                return
            log.info("sweep %d in %s exited %s: %s", attempt + 1, self.id[:12], exit_code, output[-200:])
            time.sleep(0.2 * (attempt + 1))
        log.warning(
            "timed-out processes in %s may have survived %d sweeps; the pids limit still bounds them",
            self.id[:12],
            SWEEP_ATTEMPTS,
        )

    def _oom_killed_since_last_check(self) -> bool:
        try:
            exec_id = self.api.exec_create(self.id, ["sh", "-c", _OOM_COUNT], user="root")["Id"]
            text = self._output(exec_id, OOM_CHECK_TIMEOUT_S).decode(errors="replace")
        except docker.errors.APIError:
            return False
        counts = [int(line.split()[1]) for line in text.splitlines() if line.startswith("oom_kill ")]
        seen = max(counts, default=0)
        increased = seen > self._oom_seen
        self._oom_seen = seen
        return increased

    def ensure_running(self) -> None:
        try:
            state = self.api.inspect_container(self.id)["State"]
        except docker.errors.APIError as error:
            raise _gone_or_raise(error, self.id) from error
        if not state.get("Running"):
            raise SandboxGone(f"sandbox container {self.id[:12]} stopped ({state.get('Status')}); start a new sandbox")

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write `data` to `path`, creating parent directories; raises FileTooLarge past the limit."""
        payload = data.encode() if isinstance(data, str) else data
        docker_files.write_file(self.api, self, path, payload, mode)

    def read_file(self, path: str) -> bytes:
        """The bytes of the file at `path`; raises SandboxFileNotFound or FileTooLarge."""
        return docker_files.read_file(self.api, self, path)

    def list_dir(self, path: str) -> list[DirEntry]:
        return docker_files.list_dir(self, path)

    def search(self, pattern: str, path: str) -> ExecResult:
        return docker_files.search(self, pattern, path)

    def export_tree(self, path: str, max_bytes: int) -> Iterator[bytes]:
        """The tar stream of the tree at `path` (works on a frozen sandbox); raises FileTooLarge past `max_bytes`."""
        return docker_files.export_tree(self.api, self, path, max_bytes)

    def import_tree(self, path: str, archive: bytes) -> None:
        """Unpack a tar archive into the existing directory `path`: through the receiver `prime_import` started, if
        it waits at `path` and every member is the agent's (what it writes as the agent), else by the engine."""
        receiver, self._receiver = self._receiver, None
        if receiver is not None and receiver.path == docker_files.absolute_path(path) and agent_owned(archive):
            problem = receiver.receive(archive, RECEIVE_TIMEOUT_S)
            if problem is None:
                return
            log.warning("the primed import into %s failed (%s); the engine unpacks it instead", self.id[:12], problem)
        elif receiver is not None:
            receiver.close()
        docker_files.import_tree(self.api, self, path, archive)

    def prime_import(self, path: str) -> None:
        """Start a `tar -x` into `path` as the sandbox's user that waits for the next `import_tree` there, so that
        import costs no engine round trip (a warm container readied for a reset, or for a fork)."""
        if self._receiver is not None:
            self._receiver.close()
        try:
            self._receiver = TreeReceiver(self.api, self.id, docker_files.absolute_path(path), self.user)
        except docker.errors.APIError as error:
            raise _gone_or_raise(error, self.id) from error

    def freeze(self) -> None:
        """Kill every process in the container but keep its files readable: nothing the agent started lives on."""
        try:
            self.api.kill(self.id)
        except docker.errors.APIError as error:
            if "is not running" not in str(error):
                raise _gone_or_raise(error, self.id) from error
        try:
            self.api.wait(self.id, timeout=30)
        except (docker.errors.APIError, requests.exceptions.RequestException) as error:
            raise SandboxGone(f"sandbox container {self.id[:12]} did not stop after a kill: {error}") from error

    def destroy(self) -> None:
        """Kill and remove the container; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for waiting in (self._receiver, self._runner):
            if waiting is not None:
                waiting.close()
        self._remove(self.id)
