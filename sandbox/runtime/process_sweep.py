"""How a command's processes end inside its container, fork bombs included.

Every command runs under the exec entry, a shell that forks once (for `timeout`) and reads the container's pids
cgroup with builtins:
- after the command, it kills what the command left in its process group (a fork bomb's shells, say) and waits until
  init has reaped them, so that the next command finds their pids free. A process meant to outlive its command
  detaches from the group (`setsid server &`) and is left alone;
- before a command, when the pids limit is all but spent by what earlier commands left detached, it becomes the
  reclaim, which ends every process of earlier commands first and says how many on stderr; the host reads that into
  `ExecResult.reclaimed`.

A command that runs past its timeout is swept from the host as well: every process it started inherits its marker
variable, even one that left the process group. The sweep runs as one python3 process that forks nothing: it stops
every marked process (a stopped process cannot fork), rescans until a pass finds none it has not stopped, then kills
them all. Where the image has no python3 it falls back to a shell loop, which forks a grep per process and so may miss
stragglers while the container's pids limit is exhausted.
"""

import functools
import re
from pathlib import Path

# Passed as `python3 -c` text: the sweep needs nothing written into the container first.
_STOP_THEN_KILL_SOURCE = Path(__file__).with_name("inside") / "stop_then_kill.py"

# `command` and `exec` are shell builtins: the python path starts without a fork.
_ENTRY = (
    'command -v python3 >/dev/null && exec python3 -c "$1" "$0" "$2"; '
    'for d in /proc/[0-9]*; do grep -qzx "$0" "$d/environ" 2>/dev/null && kill -9 "${d#/proc/}" 2>/dev/null; done; true'
)

# The pids limit counts as all but spent with fewer free than an eighth of it, and never fewer than this.
LEAST_FREE_PIDS = 8
# Bounds the wait before the kill for a process that is detaching (`setsid server &` as a command's last words).
DETACH_POLLS = 2000
# Bounds the wait for init to reap what the command left: builtin `kill -0` calls, a few milliseconds in all.
REAP_POLLS = 5000

# $0: ENTRY_NAME, kept through a reclaim; $1: check, checked or reclaim; $2: the stop_then_kill source; $3: this text;
# then timeout's arguments. `read`, `[`, `kill`, `wait`, `command` and `exec` are dash builtins, so nothing here forks
# but `timeout`. A backgrounded command would ignore SIGINT, but timeout installs its own handlers, so the command
# starts with the default ones.
EXEC_ENTRY = f"""flag=$1 sweep=$2 entry=$3; shift 3
spent() {{
  for f in /sys/fs/cgroup/pids.current /sys/fs/cgroup/pids/pids.current; do
    if [ -r "$f" ] && read n < "$f" && read m < "${{f%current}}max"; then
      case "$n$m" in *[!0-9]*|"") return 1;; esac
      least=$((m / 8)); [ $least -lt {LEAST_FREE_PIDS} ] && least={LEAST_FREE_PIDS}
      [ $((m - n)) -lt $least ]; return
    fi
  done
  return 1
}}
if [ "$flag" = check ] && spent; then flag=reclaim; fi
if [ "$flag" = reclaim ] && command -v python3 >/dev/null; then
  exec python3 -c "$sweep" reclaim "$0" "$entry" "$@"
fi
timeout "$@" & p=$!
wait $p; code=$?
i=0; while [ $i -lt {DETACH_POLLS} ] && kill -0 -$p 2>/dev/null; do i=$((i + 1)); done
if kill -9 -$p 2>/dev/null; then
  i=0; while [ $i -lt {REAP_POLLS} ] && kill -0 -$p 2>/dev/null; do i=$((i + 1)); done
fi
exit $code"""

# The entry's $0: its own errors name it, so that the host knows the command never started.
ENTRY_NAME = "regrow-exec-entry"
_ENTRY_COULD_NOT_FORK = re.compile(rf"\A{ENTRY_NAME}: \d+: Cannot fork\n\Z")
_RECLAIMED = re.compile(r"\Aregrow-sandbox: the pids limit was spent; processes killed before this command: (\d+)\n")


@functools.cache
def _stop_then_kill_source() -> str:
    """Read once: every exec passes it to its entry."""
    return _STOP_THEN_KILL_SOURCE.read_text()


def sweep_command(marker: str, budget_s: float = 10.0) -> list[str]:
    """argv that ends every process carrying `marker` ("NAME=value"), spending at most `budget_s` rescanning."""
    return ["sh", "-c", _ENTRY, marker, _stop_then_kill_source(), f"{budget_s:g}"]


def entry_command(argv: list[str], timeout_s: float, kill_grace_s: float, reclaim: bool = False) -> list[str]:
    """argv that runs `argv` under `timeout -k` through the exec entry; `reclaim` ends earlier commands' processes
    first, whatever the pids cgroup reads."""
    return [
        "sh",
        "-c",
        EXEC_ENTRY,
        ENTRY_NAME,
        "reclaim" if reclaim else "check",
        _stop_then_kill_source(),
        EXEC_ENTRY,
        "-k",
        f"{kill_grace_s:g}",
        f"{timeout_s:g}",
        *argv,
    ]


def split_reclaimed(stderr: bytes) -> tuple[bytes, int]:
    """(the command's own stderr, how many left-over processes the reclaim killed before it ran: 0 when it did not)."""
    found = _RECLAIMED.match(stderr.decode("ascii", errors="replace")[:200])
    if found is None:
        return stderr, 0
    return stderr[found.end() :], int(found.group(1))


def entry_could_not_fork(exit_code: int, stderr: bytes) -> bool:
    """Whether the entry itself failed to fork the command (dash exits 2 then): it never ran, and can run again."""
    return exit_code == 2 and _ENTRY_COULD_NOT_FORK.match(stderr.decode("ascii", errors="replace")) is not None
