"""Stops every process whose environment carries the marker, rescanning until a pass finds none it has not stopped,
then kills them all and waits a while for them to be reaped; it forks nothing. `python3 -c SOURCE MARKER BUDGET_S`:
exit 0 when a pass found no new one within BUDGET_S seconds, 3 when the budget ran out first."""

import os
import signal
import sys
import time

REAP_WAIT_S = 2.0


def main(argv: list[str]) -> None:
    marker, me = argv[1].encode(), os.getpid()
    stopped: set[int] = set()

    def marked():
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != me:
                try:
                    with open(f"/proc/{name}/environ", "rb") as f:
                        if marker in f.read().split(b"\0"):
                            yield int(name)
                except OSError:
                    pass

    deadline, settled = time.monotonic() + float(argv[2]), False
    while not settled and time.monotonic() < deadline:
        fresh = [pid for pid in marked() if pid not in stopped]
        settled = not fresh
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.add(pid)
            except OSError:
                pass
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    # A killed process holds its pid until it is reaped: under load that can outlast this sweep, and the next command
    # would find the pids limit still spent.
    reaped_by = time.monotonic() + REAP_WAIT_S
    while stopped and time.monotonic() < reaped_by:
        stopped = {pid for pid in stopped if os.path.exists(f"/proc/{pid}")}
        time.sleep(0.01)
    sys.exit(0 if settled else 3)


if __name__ == "__main__":
    main(sys.argv)
