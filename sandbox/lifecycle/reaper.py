"""Removes labelled containers that no live owner holds, at start and then periodically."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from sandbox.lifecycle.backend_protocol import SandboxBackend
from sandbox.lifecycle.owner import (
    CREATION_LABEL,
    OWNER_CONTAINER_LABEL,
    OWNER_LABEL,
    own_container_id,
    owner_is_alive,
)
from sandbox.lifecycle.periodic import Periodic

log = logging.getLogger(__name__)

# A container this process is creating right now is not yet in its live set.
CREATION_GRACE_S = 30.0


REMOVE_RETRIES = 10
REMOVE_RETRY_DELAY_S = 1.0


class Reaper:
    """Reaps orphans: our own untracked containers, and those of dead owners.

    An owner that ran in a container is dead when that container no longer runs (or, if it is
    our own container, when its process is gone); an owner on this host is dead when its process
    is. Containers of owners elsewhere are left alone unless `foreign_ttl_s` is set and they are
    older than that.
    """

    def __init__(
        self,
        backend: SandboxBackend,
        interval_s: float = 60.0,
        foreign_ttl_s: float | None = None,
        creation_grace_s: float = CREATION_GRACE_S,
    ):
        self.backend = backend
        self.creation_grace_s = creation_grace_s
        self.interval_s = interval_s
        self.foreign_ttl_s = foreign_ttl_s
        self.reaped_total = 0
        self._loop = Periodic("sandbox-reaper", interval_s, self._reap_logged)

    def is_orphan(self, container: dict, now: float) -> bool:
        return self.orphan_reason(container, now) is not None

    def orphan_reason(self, container: dict, now: float) -> str | None:
        """Why `container` is an orphan, in words for the log; None when someone still holds it."""
        labels = container.get("Labels") or {}
        owner = labels.get(OWNER_LABEL, "")
        age = now - float(container.get("Created", now))
        if owner == self.backend.owner:
            untracked = container["Id"] not in self.backend.live_ids() and age > self.creation_grace_s
            return f"ours ({owner}) but untracked, {age:.0f} s old" if untracked else None
        owner_container = labels.get(OWNER_CONTAINER_LABEL)
        if owner_container and owner_container != own_container_id():
            gone = not self.backend.container_running(owner_container)
            return f"its owner's container {owner_container[:12]} no longer runs" if gone else None
        alive = owner_is_alive(owner)
        if alive is None:
            expired = self.foreign_ttl_s is not None and age > self.foreign_ttl_s
            return f"owned elsewhere ({owner}), {age:.0f} s old, past the TTL" if expired else None
        return None if alive else f"its owner {owner!r} is not alive"

    def reap_once(self) -> list[str]:
        """Remove every orphan now; returns their ids. Each is logged with why: a live episode's sandbox that went
        missing should be traceable to its remover."""
        now = time.time()
        reasons = {c["Id"]: why for c in self.backend.managed_containers() if (why := self.orphan_reason(c, now))}
        for container_id, why in reasons.items():
            log.info("reaping sandbox %s: %s", container_id[:12], why)
        reaped = list(reasons)
        refused = [container_id for container_id in reaped if not self.backend.remove(container_id)]
        # The engine refuses to remove a container it is still starting (a dead owner's last request): try again soon.
        for _ in range(REMOVE_RETRIES):
            if not refused:
                break
            time.sleep(REMOVE_RETRY_DELAY_S)
            refused = [container_id for container_id in refused if not self.backend.remove(container_id)]
        if reaped:
            self.reaped_total += len(reaped)
            log.info("reaped %d orphaned sandbox containers", len(reaped))
        return reaped

    def reap_stopped(self, labels: Mapping[str, str]) -> list[str]:
        """Remove the stopped containers that carry `labels` (after an engine restart); returns their ids.

        A container that the engine stopped is no use to anyone, even one still tracked as live; only one that this
        process is creating right now (tracked, or its create request not yet answered, and not yet started) is left
        alone. One whose create was cut off by the engine going away is removed, however young.
        """
        listed = self.backend.containers_labelled(labels)
        # Read after the listing: the pool's filler creates containers meanwhile, and one listed between its create and
        # its start was once removed and then handed to an episode.
        live, creating = self.backend.live_ids(), self.backend.creations_in_flight()
        stopped = [
            c["Id"]
            for c in listed
            if c.get("State") != "running"
            and not (
                c.get("State") == "created"
                and (c["Id"] in live or (c.get("Labels") or {}).get(CREATION_LABEL) in creating)
            )
        ]
        for container_id in stopped:
            log.info("removing stopped sandbox %s (labels %s)", container_id[:12], dict(labels))
        removed = [container_id for container_id in stopped if self.backend.remove(container_id)]
        if removed:
            self.reaped_total += len(removed)
            log.info("removed %d stopped sandbox container(s) after an engine restart", len(removed))
        return removed

    def start(self, reap_now: bool = True) -> Reaper:
        """Reap once now (unless told not to), then every `interval_s` in a background thread."""
        if reap_now:
            self._reap_logged()
        self._loop.start()
        return self

    def _reap_logged(self) -> None:
        try:
            self.reap_once()
        except Exception as error:  # a flaky or absent engine must not kill the reaper or the server's start
            log.warning("reaper pass failed: %s", error)

    def stop(self) -> None:
        self._loop.stop()
