"""The backend of in-memory sandboxes: images are file trees, and it tracks and labels what it made as the Docker
backend does, so the warm pool, the reaper and the episode runtime run on it unchanged."""

from __future__ import annotations

import time
from collections.abc import Mapping

from sandbox.errors import ImageNotFound
from sandbox.lifecycle.owner import MANAGED_LABEL, OWNER_LABEL, current_owner
from sandbox.limits import Hardening, Limits
from sandbox.runtime.memory_sandbox import Commands, MemorySandbox, no_commands


class MemoryBackend:
    """Makes `MemorySandbox`es from images given as file trees, and tracks the live ones as the Docker backend does."""

    def __init__(self, images: Mapping[str, Mapping[str, bytes | str]] | None = None, commands: Commands = no_commands):
        self.images = dict(images or {})
        self.commands = commands
        self.sandboxes: dict[str, MemorySandbox] = {}
        self.owner = current_owner()
        self._created: dict[str, float] = {}

    def create(
        self,
        image: str,
        limits: Limits | None = None,
        labels: Mapping[str, str] | None = None,
        hardening: Hardening | None = None,
        workdir: str | None = None,
    ) -> MemorySandbox:
        if image not in self.images:
            raise ImageNotFound(f"image {image!r} not found in the memory backend; give it in `images`")
        sandbox = MemorySandbox.with_files(
            self.images[image],
            limits=limits or Limits(),
            user=(hardening or Hardening()).user,
            commands=self.commands,
            labels={**(labels or {}), MANAGED_LABEL: "1", OWNER_LABEL: self.owner},
            on_destroy=self.remove,
        )
        if workdir:
            sandbox.make_dirs(workdir)
        self.sandboxes[sandbox.id] = sandbox
        self._created[sandbox.id] = time.time()
        return sandbox

    def remove(self, container_id: str) -> bool:
        sandbox = self.sandboxes.pop(container_id, None)
        self._created.pop(container_id, None)
        if sandbox is not None and not sandbox.destroyed:
            sandbox.destroy()
        return True

    def live_ids(self) -> set[str]:
        return set(self.sandboxes)

    def creations_in_flight(self) -> set[str]:
        return set()  # a memory sandbox is made and tracked in one call

    def ping(self, timeout: float = 2.0) -> str | None:
        return None

    def image_exists(self, image: str) -> bool:
        return image in self.images

    def container_running(self, container_id: str) -> bool:
        sandbox = self.sandboxes.get(container_id)
        return sandbox is not None and not sandbox.frozen

    def container_fate(self, container_id: str) -> str:
        sandbox = self.sandboxes.get(container_id)
        if sandbox is None:
            return "its container was removed"
        return "its container is paused" if sandbox.frozen else "its container is running"

    def managed_containers(self) -> list[dict]:
        return [self._listing(sandbox) for sandbox in self.sandboxes.values()]

    def containers_labelled(self, labels: Mapping[str, str]) -> list[dict]:
        return [
            self._listing(sandbox)
            for sandbox in self.sandboxes.values()
            if all(sandbox.labels.get(key) == value for key, value in labels.items())
        ]

    def _listing(self, sandbox: MemorySandbox) -> dict:
        state = "exited" if sandbox.frozen else "running"
        return {"Id": sandbox.id, "Labels": sandbox.labels, "State": state, "Created": self._created[sandbox.id]}
