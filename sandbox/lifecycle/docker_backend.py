"""The Docker backend: connects to one engine, starts hardened sandboxes on it and tracks the ones it owns."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from sandbox.errors import DockerUnavailable, ImageNotFound
from sandbox.lifecycle import images
from sandbox.lifecycle.owner import (
    CREATION_LABEL,
    MANAGED_LABEL,
    OWNER_CONTAINER_LABEL,
    OWNER_LABEL,
    current_owner,
    own_container_id,
)
from sandbox.limits import Hardening, Limits
from sandbox.runtime.docker_sandbox import DockerSandbox
from sandbox.settings import SandboxSettings

log = logging.getLogger(__name__)

# How long an engine health check waits for the engine's answer.
PING_TIMEOUT_S = 2.0
# Spoken until an engine that was down at start answers; every engine since Docker 20.10 understands it.
FALLBACK_API_VERSION = "1.41"


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
        self._creating: set[str] = set()  # creation labels of create requests not yet answered and tracked
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
    ) -> DockerSandbox:
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
        container_id = self._create_container(
            image,
            command=["sleep", "infinity"],
            user=hardening.user,
            working_dir=workdir,
            labels=all_labels,
            host_config=host_config,
        )
        try:
            self.api.start(container_id)
        except BaseException:
            # Untracked even when the engine went away meanwhile: the reaper then removes it once the engine is back.
            self.remove(container_id)
            raise
        log.debug("sandbox %s started from %s", container_id[:12], image)
        return DockerSandbox(self.api, container_id, limits, hardening.user, self.remove)

    def _owned(self, labels: Mapping[str, str] | None = None) -> dict[str, str]:
        """`labels` plus the ones that mark a container as regrow's and name its owner, for the reaper."""
        owned = {**(labels or {}), MANAGED_LABEL: "1", OWNER_LABEL: self.owner}
        if container := own_container_id():
            owned[OWNER_CONTAINER_LABEL] = container
        return owned

    def create_stopped(self, image: str) -> str:
        """A container of `image` that never runs (its files can be exported), tracked and labelled like a sandbox."""
        return self._create_container(image, command=["true"], labels=self._owned(), network_disabled=True)

    def _create_container(self, image: str, labels: dict[str, str], **options) -> str:
        """Create a container, tracked; one the engine made while the request was interrupted (Ctrl-C, SIGTERM,
        a timeout) is found by a label unique to this request and removed, since its id never reached us."""
        creation = uuid.uuid4().hex
        with self._lock:
            self._creating.add(creation)
        try:
            created = self.api.create_container(image, labels={**labels, CREATION_LABEL: creation}, **options)
        except docker.errors.ImageNotFound as error:
            raise ImageNotFound(f"image {image!r} not found locally: build it first (`regrow images build`)") from error
        except BaseException:
            self._remove_created(creation)
            raise
        else:
            with self._lock:
                self._live.add(created["Id"])
            return created["Id"]
        finally:
            with self._lock:
                self._creating.discard(creation)

    def _remove_created(self, creation: str) -> None:
        try:
            made = self.api.containers(all=True, filters={"label": f"{CREATION_LABEL}={creation}"})
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            log.warning("could not look for a container whose creation was interrupted: %s", error)
            return
        for container in made:
            self.remove(container["Id"])

    def build_image(
        self,
        context: Path,
        tag: str,
        buildargs: Mapping[str, str],
        labels: Mapping[str, str],
        target: str | None = None,
    ) -> None:
        images.build_image(self.client, context, tag, buildargs, labels, target)

    def remove_image(self, tag: str) -> None:
        images.remove_image(self.client, tag)

    def image_files(self, image: str) -> Iterator[tuple[str, bytes]]:
        """Every file of `image`, read from the export of a container that is created but never started; the
        container is removed as soon as the export has begun, so a run killed while it reads leaves none behind."""
        container = self.create_stopped(image)
        try:
            chunks = images.export_begun(self.api, container, image)
            self.remove(container)  # the export holds the files from here on; a long read needs no container
            yield from images.tar_files(chunks)
        finally:
            self.remove(container)

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

    def creations_in_flight(self) -> set[str]:
        """The creation labels of containers this backend is creating now: listed by the engine, not yet tracked."""
        with self._lock:
            return set(self._creating)

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

    def container_fate(self, container_id: str) -> str:
        """What became of a container, in words for feedback and logs: removed, or its state (through regrow's docker
        proxy only the status shows)."""
        try:
            state = self.api.inspect_container(container_id)["State"]
        except docker.errors.NotFound:
            return "its container was removed"
        words = [f"its container is {state.get('Status') or 'in an unknown state'}"]
        if state.get("Status") == "exited" and state.get("ExitCode") is not None:
            words.append(f"exit code {state['ExitCode']}")
        if state.get("OOMKilled"):
            words.append("killed for memory")
        if state.get("Error"):
            words.append(f"the engine says: {state['Error']}")
        return ", ".join(words)

    def image_exists(self, image: str) -> bool:
        try:
            self.api.inspect_image(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    def image_id(self, image: str) -> str:
        """The image's content ID (`sha256:...`): what a tag names may change, this does not."""
        return str(self.api.inspect_image(image)["Id"])
