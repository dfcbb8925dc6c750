"""What starts and tracks sandboxes, whatever runs them: the `SandboxBackend` Protocol the warm pool, the reaper and
the env server use; `DockerBackend` implements it for an engine, `MemoryBackend` for tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sandbox.limits import Hardening, Limits
from sandbox.runtime.sandbox_protocol import Sandbox


class SandboxBackend(Protocol):
    """Starts sandboxes from images, removes them, and lists the ones it labelled."""

    owner: str  # the owner label of every sandbox this backend starts

    def create(
        self,
        image: str,
        limits: Limits | None = None,
        labels: Mapping[str, str] | None = None,
        hardening: Hardening | None = None,
        workdir: str | None = None,
    ) -> Sandbox: ...

    def remove(self, container_id: str) -> bool: ...

    def live_ids(self) -> set[str]: ...

    def creations_in_flight(self) -> set[str]: ...

    def ping(self, timeout: float = 2.0) -> str | None: ...

    def image_exists(self, image: str) -> bool: ...

    def container_running(self, container_id: str) -> bool: ...

    def container_fate(self, container_id: str) -> str: ...

    def managed_containers(self) -> list[dict]: ...

    def containers_labelled(self, labels: Mapping[str, str]) -> list[dict]: ...
