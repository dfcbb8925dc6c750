"""The sweep that ends a timed-out command's processes inside its container, fork bombs included.

Every process a command starts inherits its marker variable, even one that left the process group.
The sweep runs as one python3 process that forks nothing: it stops every marked process (a stopped
process cannot fork), rescans until a pass finds none it has not stopped, then kills them all.
Where the image has no python3 it falls back to a shell loop, which forks a grep per process and so
may miss stragglers while the container's pids limit is exhausted.
"""

from pathlib import Path

# Passed as `python3 -c` text: the sweep needs nothing written into the container first.
_STOP_THEN_KILL_SOURCE = Path(__file__).with_name("inside") / "stop_then_kill.py"

# `command` and `exec` are shell builtins: the python path starts without a fork.
_ENTRY = (
    'command -v python3 >/dev/null && exec python3 -c "$1" "$0" "$2"; '
    'for d in /proc/[0-9]*; do grep -qzx "$0" "$d/environ" 2>/dev/null && kill -9 "${d#/proc/}" 2>/dev/null; done; true'
)


def sweep_command(marker: str, budget_s: float = 10.0) -> list[str]:
    """argv that ends every process carrying `marker` ("NAME=value"), spending at most `budget_s` rescanning."""
    return ["sh", "-c", _ENTRY, marker, _STOP_THEN_KILL_SOURCE.read_text(), f"{budget_s:g}"]
