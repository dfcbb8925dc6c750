"""Who owns a container: a label value naming one live process, and the test of its liveness."""

import os
import socket
from functools import cache

MANAGED_LABEL = "regrow.managed"
OWNER_LABEL = "regrow.owner"


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
