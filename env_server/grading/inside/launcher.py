"""The parent of one graded run: it starts a child interpreter (the tests or the checks), keeps what the child sends on
a pipe, kills whatever the child left running, and reports.

`python launcher.py CONFIG NONCE_FILE REPORT_FILE`. The launcher runs as the agent's uid but apart from the code
under test. It reads the run's nonce and empties its file before the child starts, and makes itself non-dumpable,
so the child can read neither its memory nor its environment nor its file descriptors. The report file holds the
child's lines; stdout gets one line, `NONCE SHA256` of that file, written after every process the child started is
dead. The grader counts a report only with this launcher's exit status 0, that line, and a file that hashes to it.
"""

import ctypes
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_DUMPABLE = 4
MAX_REPORT_BYTES = 4 * 1024 * 1024  # past this the child's lines are dropped and the report says so
CHILDREN = {"tests": "pytest_child.py", "checks": "check_child.py"}


def _start_time(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[19])


def sweep(since):
    """Stop, then kill, every process started at or after `since` (clock ticks after boot), this one and its parent
    excepted."""
    me, stopped = {os.getpid(), os.getppid()}, set()
    for _ in range(1000):
        found = set()
        for name in os.listdir("/proc"):
            try:
                if name.isdigit() and int(name) not in me and int(name) not in stopped and _start_time(name) >= since:
                    found.add(int(name))
            except (OSError, ValueError, IndexError):
                pass
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        stopped |= found
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _read_nonce(path):
    with open(path, "r+") as handle:
        nonce = handle.read().strip()
        handle.seek(0)
        handle.truncate()
    return nonce


def collect(child, read_end, deadline):
    """The child's lines until it exits (or the deadline passes: then it is killed), and whether it ran out of time."""
    chunks, size, timed_out = [], 0, False
    os.set_blocking(read_end, False)
    while True:
        ready, _, _ = select.select([read_end], [], [], 0.2)
        if ready:
            try:
                data = os.read(read_end, 1 << 16)
            except BlockingIOError:
                data = None
            if data:
                if size < MAX_REPORT_BYTES:
                    chunks.append(data)
                size += len(data)
                continue
        if child.poll() is not None:
            break
        if time.monotonic() > deadline:
            timed_out = True
            child.kill()
            child.wait()
            break
    text = b"".join(chunks).decode("utf-8", errors="replace")
    return text.splitlines(), size > MAX_REPORT_BYTES, timed_out


def main(argv):
    config_path, nonce_path, report_path = argv[1:4]
    nonce = _read_nonce(nonce_path)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    report = open(report_path, "w")  # opened before the child exists, written after it is dead
    with open(config_path) as handle:
        config = json.load(handle)
    read_end, write_end = os.pipe()
    child_script = os.path.join(os.path.dirname(os.path.abspath(__file__)), CHILDREN[config["kind"]])
    with open(config["log"], "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-P", child_script, config_path, str(write_end)],
            pass_fds=(write_end,),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=config["cwd"],
            start_new_session=True,
        )
        os.close(write_end)
        since = _start_time(child.pid)  # what the child starts, starts no earlier than it
        lines, overflow, timed_out = collect(child, read_end, time.monotonic() + config["timeout_s"])
        sweep(since)
    summary = {"child_exit": child.returncode, "timed_out": timed_out, "overflow": overflow}
    text = json.dumps({**summary, "lines": lines})
    report.write(text)
    report.close()
    print(nonce, hashlib.sha256(text.encode()).hexdigest(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
