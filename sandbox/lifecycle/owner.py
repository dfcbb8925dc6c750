"""Who owns a container: a label value naming one live process, and the test of its liveness."""

import os
import re
import socket
from functools import cache

MANAGED_LABEL = "regrow.managed"
OWNER_LABEL = "regrow.owner"
# Set when the owner itself runs in a container: the engine then tells whether that container lives.
OWNER_CONTAINER_LABEL = "regrow.owner.container"
# Unique to one create request: finds the container an interrupted request made, and spares one being made.
CREATION_LABEL = "regrow.creation"


# Docker bind-mounts these from /var/lib/docker/containers/<id>/ into each container it runs.
_CONTAINER_FILES = ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")


@cache
def own_container_id() -> str | None:
    """The id of the Docker container this process runs in, or None on a plain host."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            return container_id_from_mountinfo(mounts.read())
    except OSError:
        return None


def container_id_from_mountinfo(text: str) -> str | None:
    """The container whose files are mounted at /etc/hostname and its siblings; on a host, other containers' own
    mounts (their /dev/shm under /var/lib/docker/containers/<id>/) are listed too, and must not count."""
    for line in text.splitlines():
        fields = line.split()  # id, parent, major:minor, root, mount point, ...
        if len(fields) > 4 and fields[4] in _CONTAINER_FILES:
            if match := re.search(r"/containers/([0-9a-f]{64})/", fields[3]):
                return match.group(1)
    return None


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            # Field 22 (starttime) follows the parenthesised command name, which may hold spaces.
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@cache
def current_owner() -> str:
    """`host:pid:starttime` of this process; the start time tells a live owner from a reused PID."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or 0}"


def owner_is_alive(owner: str) -> bool | None:
    """True or False for an owner on this host; None when the owner lives elsewhere and we cannot tell."""
    try:
        host, pid, ticks = owner.rsplit(":", 2)
        pid_number = int(pid)
    except ValueError:
        return False
    if host != socket.gethostname():
        return None
    return _start_ticks(pid_number) == ticks
