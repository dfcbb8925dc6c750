"""The exec entry's shell and its messages, run on this host's dash (no engine): what a command leaves in its process
group ends with it, a detached process stays, and the host reads the reclaim and the entry's own fork failure."""

import os
import signal
import subprocess
import time
from pathlib import Path

from sandbox.runtime.process_sweep import ENTRY_NAME, entry_command, entry_could_not_fork, split_reclaimed


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_what_a_command_left_in_its_group_ends_with_it_and_a_detached_process_stays(tmp_path):
    script = (
        f"sleep 300 & echo $! > {tmp_path}/grouped; setsid sleep 301 > /dev/null 2>&1 & echo $! > {tmp_path}/detached; "
        "sleep 0.3; exit 5"
    )
    done = subprocess.run(entry_command(["sh", "-c", script], 30, 1), capture_output=True, timeout=60)
    grouped, detached = (int((tmp_path / name).read_text()) for name in ("grouped", "detached"))
    try:
        assert done.returncode == 5 and done.stderr == b""  # the command's own exit code, and nothing of the entry's
        assert not _alive(grouped)
        assert _alive(detached)
    finally:
        os.kill(detached, signal.SIGKILL)


def test_a_command_past_its_timeout_gets_timeouts_exit_code():
    started = time.monotonic()
    done = subprocess.run(entry_command(["sleep", "30"], 0.5, 0.5), capture_output=True, timeout=60)
    assert done.returncode == 124 and time.monotonic() - started < 10


def test_the_reclaims_line_is_read_off_the_commands_stderr_and_nothing_else_is():
    line = b"regrow-sandbox: the pids limit was spent; processes killed before this command: 62\n"
    assert split_reclaimed(line + b"oops\n") == (b"oops\n", 62)
    assert split_reclaimed(b"oops\n" + line) == (b"oops\n" + line, 0)  # only as the first line, where the entry puts it
    assert split_reclaimed(b"\xff\xfe not text") == (b"\xff\xfe not text", 0)


def test_only_the_entrys_own_fork_failure_counts_as_a_command_that_never_ran():
    assert entry_could_not_fork(2, f"{ENTRY_NAME}: 17: Cannot fork\n".encode())
    assert not entry_could_not_fork(2, b"sh: 1: Cannot fork\n")  # the command's own shell: it ran
    assert not entry_could_not_fork(0, f"{ENTRY_NAME}: 17: Cannot fork\n".encode())
    assert not entry_could_not_fork(2, f"output\n{ENTRY_NAME}: 17: Cannot fork\n".encode())


def test_the_reclaim_is_handed_the_entrys_name_so_that_its_fork_failures_are_still_known(tmp_path):
    """After a reclaim the entry ran as `sh`, so a fork failure right after it read as the command's own."""
    fake = tmp_path / "python3"  # stands in for the reclaim, which on this host would end every process of the box
    fake.write_text('#!/bin/sh\nprintf "%s|%s|%s" "$3" "$4" "$6"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(entry_command(["true"], 5, 1, reclaim=True), capture_output=True, env=env, timeout=60)
    assert done.stdout.decode() == f"reclaim|{ENTRY_NAME}|-k"
