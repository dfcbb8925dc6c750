"""Stops every process whose environment carries the marker, rescanning until a pass finds none it has not stopped,
then kills them all and waits a while for them to be reaped; it forks nothing.

`python3 -c SOURCE MARKER BUDGET_S`: exit 0 when a pass found no new one within BUDGET_S seconds, 3 when the budget
ran out first.

`python3 -c SOURCE reclaim NAME ENTRY ARGS...`: the exec entry's way out when the container's pids limit is spent. It
ends every process outside init's session but itself, says so on stderr, then becomes `sh -c ENTRY` again, named
NAME (so that the host still knows the entry's own errors) and with the check turned off, so that the command runs
in the pids it freed.
"""

import os
import signal
import sys
import time

REAP_WAIT_S = 2.0
RECLAIM_BUDGET_S = 5.0
# The first line the command's stderr gets after a reclaim; the host reads the count back from it.
RECLAIMED = "regrow-sandbox: the pids limit was spent; processes killed before this command: "


def stop_then_kill(is_target, budget_s: float) -> tuple[bool, int]:
    """(whether a pass found no new target within the budget, how many were stopped and killed)."""
    me = os.getpid()
    stopped: set[int] = set()

    def targets():
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != me:
                try:
                    if is_target(int(name)):
                        yield int(name)
                except OSError:
                    pass

    deadline, settled = time.monotonic() + budget_s, False
    while not settled and time.monotonic() < deadline:
        fresh = [pid for pid in targets() if pid not in stopped]
        settled = not fresh
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGSTOP)  # a stopped process cannot fork
                stopped.add(pid)
            except OSError:
                pass
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    count = len(stopped)
    # A killed process holds its pid until it is reaped: under load that can outlast this sweep, and the next command
    # would find the pids limit still spent.
    reaped_by = time.monotonic() + REAP_WAIT_S
    while stopped and time.monotonic() < reaped_by:
        stopped = {pid for pid in stopped if os.path.exists(f"/proc/{pid}")}
        time.sleep(0.01)
    return settled, count


def session(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[3])  # after the name: state, ppid, pgrp, session


def carries(marker: bytes):
    def is_marked(pid: int) -> bool:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")

    return is_marked


def main(argv: list[str]) -> None:
    if argv[1] == "reclaim":
        name, entry, command = argv[2], argv[3], argv[4:]
        # init's session holds the container's own processes; every exec starts a session of its own
        container = session(1)
        _, count = stop_then_kill(lambda pid: session(pid) != container, RECLAIM_BUDGET_S)
        sys.stderr.write(f"{RECLAIMED}{count}\n")
        sys.stderr.flush()
        os.execv("/bin/sh", ["sh", "-c", entry, name, "checked", "-", "-", *command])
    settled, _ = stop_then_kill(carries(argv[1].encode()), float(argv[2]))
    sys.exit(0 if settled else 3)


if __name__ == "__main__":
    main(sys.argv)
