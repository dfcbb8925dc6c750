"""Hardened Docker sandboxes: one container, commands with hard timeouts, tar-based file I/O."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from sandbox import images
from sandbox.errors import DockerUnavailable, ExecTimeout, ImageNotFound, SandboxGone
from sandbox.exec_stream import read_exec_stream
from sandbox.file_transfer import DirEntry, export_tree, import_tree, list_dir, read_file, search, write_file
from sandbox.limits import Hardening, Limits
from sandbox.owner import MANAGED_LABEL, OWNER_CONTAINER_LABEL, OWNER_LABEL, current_owner, own_container_id
from sandbox.process_sweep import sweep_command
from sandbox.settings import SandboxSettings

log = logging.getLogger(__name__)

KILL_GRACE_S = 2.0
# Beyond timeout + kill grace, the host stops waiting and kills the command's processes itself.
OUTER_GRACE_S = 5.0
EXEC_MARKER = "REGROW_EXEC"
EXIT_CODE_WAIT_S = 15.0
EXIT_CODE_POLL_S = 0.1  # the longest pause between polls
SWEEP_ATTEMPTS = 5
SWEEP_TIMEOUT_S = 30.0
OOM_CHECK_TIMEOUT_S = 30.0
# How long an engine health check waits for the engine's answer.
PING_TIMEOUT_S = 2.0
# Spoken until an engine that was down at start answers; every engine since Docker 20.10 understands it.
FALLBACK_API_VERSION = "1.41"
_OOM_COUNT = "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"


@dataclass(frozen=True)
class ExecResult:
    """What one command did."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration_s: float
    oom_killed: bool = False

    def raise_for_timeout(self) -> ExecResult:
        if self.timed_out:
            raise ExecTimeout(
                f"command timed out after {self.duration_s:.1f}s; raise its timeout or make it faster", self
            )
        return self


def _gone_or_raise(error: docker.errors.APIError, container_id: str) -> Exception:
    status = getattr(error.response, "status_code", None)
    if isinstance(error, docker.errors.NotFound) or status in (404, 409):
        return SandboxGone(
            f"sandbox container {container_id[:12]} is gone ({error.explanation or error}); start a new sandbox"
        )
    return error


class Sandbox:
    """One running container. Use it as a context manager so it is always destroyed."""

    def __init__(self, backend: DockerBackend, container_id: str, limits: Limits, user: str):
        self.backend = backend
        self.id = container_id
        self.limits = limits
        self.user = user
        self._oom_seen = 0
        self._closed = False

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    @property
    def api(self) -> docker.APIClient:
        return self.backend.api

    def exec(
        self,
        command: str | list[str],
        timeout: float = 30.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run `command` (a shell string, or argv) under `timeout -k` in its own process group."""
        if not 0 < timeout <= 24 * 3600:
            raise ValueError(f"timeout must be in (0, 86400] seconds, got {timeout}")
        argv = command if isinstance(command, list) else ["sh", "-c", command]
        marker = f"{EXEC_MARKER}={uuid.uuid4().hex}"
        environment = [marker]
        for key, value in (env or {}).items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"invalid environment variable {key!r}: names need no '=' and no NUL")
            environment.append(f"{key}={value}")
        wrapped = ["timeout", "-k", f"{KILL_GRACE_S:g}", f"{timeout:g}", *argv]
        started = time.monotonic()
        try:
            exec_id = self.api.exec_create(
                self.id, wrapped, user=user or self.user, workdir=cwd, environment=environment, stdin=False, tty=False
            )["Id"]
            sock = self.api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as error:
            raise _gone_or_raise(error, self.id) from error
        try:
            stream = read_exec_stream(
                sock, started + timeout + KILL_GRACE_S + OUTER_GRACE_S, self.limits.output_cap_bytes
            )
        finally:
            sock.close()
        exit_code = self._exit_code(exec_id, stream.deadline_hit)
        duration = time.monotonic() - started
        timed_out = stream.deadline_hit or (exit_code in (124, 137) and duration >= timeout)
        if timed_out:
            self._sweep(marker, user or self.user)
        oom = exit_code == 137 and not timed_out and self._oom_killed_since_last_check()
        return ExecResult(
            exit_code=exit_code,
            stdout=stream.stdout.decode("utf-8", errors="replace"),
            stderr=stream.stderr.decode("utf-8", errors="replace"),
            timed_out=timed_out,
            truncated=stream.truncated,
            duration_s=duration,
            oom_killed=oom,
        )

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
        write_file(self, path, payload, mode)

    def read_file(self, path: str) -> bytes:
        """The bytes of the file at `path`; raises SandboxFileNotFound or FileTooLarge."""
        return read_file(self, path)

    def list_dir(self, path: str) -> list[DirEntry]:
        return list_dir(self, path)

    def search(self, pattern: str, path: str) -> ExecResult:
        return search(self, pattern, path)

    def export_tree(self, path: str, max_bytes: int) -> Iterator[bytes]:
        """The tar stream of the tree at `path` (works on a frozen sandbox); raises FileTooLarge past `max_bytes`."""
        return export_tree(self, path, max_bytes)

    def import_tree(self, path: str, archive: bytes) -> None:
        """Unpack a tar archive into the existing directory `path`."""
        import_tree(self, path, archive)

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
        self.backend.remove(self.id)


def _client(base_url: str | None, timeout: float, version: str | None = None) -> docker.DockerClient:
    """A client of the engine; version None asks the engine which API version to speak."""
    if base_url:
        return docker.DockerClient(base_url=base_url, timeout=timeout, version=version)
    return docker.from_env(timeout=timeout, version=version)


class DockerBackend:
    """Starts hardened sandboxes on one Docker engine and tracks the ones it owns.

    With `wait_for_engine`, an engine that does not answer yet is no error: the backend speaks a fixed API version
    until `ping` first succeeds, then asks the engine for its own.
    """

    client: docker.DockerClient
    api: docker.APIClient

    def __init__(self, base_url: str | None = None, timeout: float = 60.0, wait_for_engine: bool = False):
        self.base_url = base_url or SandboxSettings().docker_host  # else DOCKER_HOST, else the default socket
        self.where = self.base_url or "the default socket (DOCKER_HOST or unix:///var/run/docker.sock)"
        self._timeout = timeout
        self._pinger: docker.APIClient | None = None
        self.owner = current_owner()
        self._live: set[str] = set()
        self._lock = threading.Lock()
        try:
            self._connect()
        except DockerUnavailable:
            if not wait_for_engine:
                raise
            self.client = _client(self.base_url, timeout, version=FALLBACK_API_VERSION)
            self.api = self.client.api
            self._negotiated = False

    def _connect(self) -> None:
        try:
            client = _client(self.base_url, self._timeout)
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            raise DockerUnavailable(
                f"Docker engine not reachable at {self.where}: is the daemon running and is its socket readable? "
                "(`docker info`)"
            ) from error
        self.client = client
        self.api = client.api
        self._negotiated = True

    def ping(self, timeout: float = PING_TIMEOUT_S) -> str | None:
        """None when the engine answers within `timeout`, else what went wrong (the engine's own error)."""
        try:
            if self._pinger is None:
                self._pinger = _client(self.base_url, timeout, version=FALLBACK_API_VERSION).api
            self._pinger.ping()
            if not self._negotiated:
                self._connect()
        except (docker.errors.DockerException, requests.exceptions.RequestException, DockerUnavailable) as error:
            cause = error.__cause__ if isinstance(error, DockerUnavailable) and error.__cause__ else error
            return f"no answer from {self.where} within {timeout:g}s: {cause}"[:500]
        return None

    def create(
        self,
        image: str,
        limits: Limits | None = None,
        labels: Mapping[str, str] | None = None,
        hardening: Hardening | None = None,
        workdir: str | None = None,
    ) -> Sandbox:
        """Start a container from `image` with the hardened defaults, ready for `exec`."""
        limits = limits or Limits()
        hardening = hardening or Hardening()
        all_labels = self._owned(labels)
        host_config = self.api.create_host_config(
            network_mode="bridge" if hardening.network else "none",
            cap_drop=["ALL"] if hardening.drop_all_capabilities else None,
            cap_add=list(hardening.extra_capabilities) or None,
            security_opt=["no-new-privileges"] if hardening.no_new_privileges else None,
            pids_limit=limits.pids,
            mem_limit=limits.memory_bytes,
            memswap_limit=limits.memory_bytes,
            nano_cpus=int(limits.cpus * 1e9),
            init=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_bytes},mode=1777"},
        )
        try:
            container_id = self.api.create_container(
                image,
                command=["sleep", "infinity"],
                user=hardening.user,
                working_dir=workdir,
                labels=all_labels,
                host_config=host_config,
            )["Id"]
        except docker.errors.ImageNotFound as error:
            raise ImageNotFound(f"image {image!r} not found locally: build it first (`regrow images build`)") from error
        with self._lock:
            self._live.add(container_id)
        try:
            self.api.start(container_id)
        except BaseException:
            # Untracked even when the engine went away meanwhile: the reaper then removes it once the engine is back.
            self.remove(container_id)
            raise
        log.debug("sandbox %s started from %s", container_id[:12], image)
        return Sandbox(self, container_id, limits, hardening.user)

    def _owned(self, labels: Mapping[str, str] | None = None) -> dict[str, str]:
        """`labels` plus the ones that mark a container as regrow's and name its owner, for the reaper."""
        owned = {**(labels or {}), MANAGED_LABEL: "1", OWNER_LABEL: self.owner}
        if container := own_container_id():
            owned[OWNER_CONTAINER_LABEL] = container
        return owned

    def create_stopped(self, image: str) -> str:
        """A container of `image` that never runs (its files can be exported), tracked and labelled like a sandbox."""
        try:
            created = self.api.create_container(image, command=["true"], labels=self._owned(), network_disabled=True)
        except docker.errors.ImageNotFound as error:
            raise ImageNotFound(f"image {image!r} not found locally: build it first (`regrow images build`)") from error
        with self._lock:
            self._live.add(created["Id"])
        return created["Id"]

    def build_image(
        self,
        context: Path,
        tag: str,
        buildargs: Mapping[str, str],
        labels: Mapping[str, str],
        target: str | None = None,
    ) -> None:
        images.build_image(self, context, tag, buildargs, labels, target)

    def remove_image(self, tag: str) -> None:
        images.remove_image(self, tag)

    def image_files(self, image: str) -> Iterator[tuple[str, bytes]]:
        return images.image_files(self, image)

    def remove(self, container_id: str) -> bool:
        """Force-remove a container; False when the engine refused (for example while it was still starting it)."""
        with self._lock:
            self._live.discard(container_id)
        try:
            self.api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            if "already in progress" not in str(error):
                log.warning("could not remove sandbox %s: %s", container_id[:12], error)
                return False
        except requests.exceptions.RequestException as error:
            # The engine is away; untracked now, the reaper removes the container once the engine answers.
            log.warning("could not remove sandbox %s, the engine did not answer: %s", container_id[:12], error)
            return False
        return True

    def live_ids(self) -> set[str]:
        with self._lock:
            return set(self._live)

    def managed_containers(self) -> list[dict]:
        """Every container on the engine that carries regrow's managed label."""
        return self.api.containers(all=True, filters={"label": f"{MANAGED_LABEL}=1"})

    def containers_labelled(self, labels: Mapping[str, str]) -> list[dict]:
        """Every regrow container, running or not, that carries all of `labels` (each with its Id, State and Labels)."""
        # Restricted to managed containers, as the docker proxy requires of every listing (else 403).
        wanted = {**labels, MANAGED_LABEL: "1"}
        return self.api.containers(all=True, filters={"label": [f"{key}={value}" for key, value in wanted.items()]})

    def container_running(self, container_id: str) -> bool:
        try:
            return bool(self.api.inspect_container(container_id)["State"].get("Running"))
        except docker.errors.NotFound:
            return False

    def image_exists(self, image: str) -> bool:
        try:
            self.api.inspect_image(image)
            return True
        except docker.errors.ImageNotFound:
            return False
