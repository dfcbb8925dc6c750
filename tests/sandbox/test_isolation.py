"""Hardening: pids, memory and network limits hold, and the engine stays usable."""

import time

from sandbox import Limits

MiB = 1024 * 1024


def test_fork_bomb_is_stopped_by_the_pids_limit(docker_backend, base_image):
    with docker_backend.create(base_image, limits=Limits(pids=64)) as sb:
        bomb = sb.exec("bomb() { bomb | bomb & }; bomb", timeout=5)
        assert "Cannot fork" in bomb.stderr or "Resource temporarily unavailable" in bomb.stderr
        # counted from the host: while the bomb's stragglers hold every pid, nothing new starts inside
        assert 0 < len(sb.api.top(sb.id)["Processes"]) <= 64
        deadline = time.monotonic() + 60
        while (after := sb.exec("echo usable", timeout=10)).exit_code != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert after.stdout == "usable\n"  # the bomb burns out and the sandbox works again
    with docker_backend.create(base_image) as other:  # the engine and host are still fine
        assert other.exec("echo alive").stdout == "alive\n"


# Each child leaves the process group, so `timeout` cannot reach it, and forks on as long as it lives.
_SESSION_BOMB = (
    "python3 -c 'import os\nwhile True:\n    try:\n        os.fork() or os.setsid()\n    except OSError:\n        pass'"
)


def _processes(sb) -> list:
    return sb.api.top(sb.id)["Processes"] or []


def _settled(count, at_most: float = 60.0) -> int:
    """`count()` once it stops changing (a killed process lingers until it is reaped, later on a loaded host)."""
    deadline, last = time.monotonic() + at_most, count()
    while time.monotonic() < deadline:
        time.sleep(1)
        if (now := count()) == last:
            return now
        last = now
    return last


def test_a_fork_bomb_that_outlives_its_timeout_is_swept(docker_backend, base_image):
    with docker_backend.create(base_image, limits=Limits(pids=64)) as sb:
        bomb = sb.exec(_SESSION_BOMB, timeout=2)
        assert bomb.timed_out
        # the container's init and nothing of the bomb's: forking on, it would never settle below the limit
        assert _settled(lambda: len(_processes(sb))) <= 2, _processes(sb)
        assert sb.exec("echo usable", timeout=10).stdout == "usable\n"  # no stragglers hold the pids


def test_after_a_fork_bomb_the_next_command_finds_its_sandbox_usable_every_time(docker_backend, base_image):
    with docker_backend.create(base_image, limits=Limits(pids=64)) as sb:
        for _ in range(8):  # in a row, in one container: nothing of an earlier bomb may be left for the next
            sb.exec("bomb() { bomb | bomb & }; bomb", timeout=10)
            after = sb.exec("echo ALIVE", timeout=10)
            # what the bomb left is killed after it, or reclaimed before this, and either way this command runs
            assert (after.exit_code, after.stdout, after.stderr) == (0, "ALIVE\n", "")


# The first process returns at once; its child leaves the session and it and its children fork for as long as they live.
_DETACHED_BOMB = (
    "python3 -c 'import os, sys\nif os.fork():\n    sys.exit(0)\nos.setsid()\nwhile True:\n    try:\n"
    "        os.fork()\n    except OSError:\n        pass'"
)


def test_a_detached_fork_bomb_is_reclaimed_before_the_next_command_and_said_so(docker_backend, base_image):
    with docker_backend.create(base_image, limits=Limits(pids=64)) as sb:
        for _ in range(3):
            bomb = sb.exec(_DETACHED_BOMB, timeout=10)
            assert bomb.exit_code == 0 and not bomb.timed_out  # it returned: the detached part is not its business
            assert _settled(lambda: len(_processes(sb))) > 56  # the bomb fills the pids limit
            after = sb.exec("echo ALIVE", timeout=30)  # the reclaim before it does not count against its 30 s
            assert (after.exit_code, after.stdout, after.stderr) == (0, "ALIVE\n", "")
            assert after.reclaimed > 50  # nearly the whole limit was the bomb's, and each was counted
        kept = sb.exec("setsid sleep 60 > /dev/null 2>&1 & echo started", timeout=10)
        assert kept.stdout == "started\n"
        assert "sleep" in sb.exec("cat /proc/[0-9]*/comm", timeout=10).stdout  # a detached process outlives its command


def test_memory_hog_is_oom_killed_and_reported(docker_backend, base_image):
    with docker_backend.create(base_image, limits=Limits(memory_bytes=128 * MiB)) as sb:
        result = sb.exec("python3 -c 'x = bytearray(1024 * 1024 * 1024); print(len(x))'", timeout=60)
        assert result.exit_code == 137
        assert result.oom_killed
        assert sb.exec("echo after").stdout == "after\n"


def test_network_access_fails_inside_the_sandbox(sandbox):
    probe = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)"
    result = sandbox.exec(["python3", "-c", probe], timeout=20)
    assert result.exit_code != 0
    assert "Network is unreachable" in result.stderr or "OSError" in result.stderr
    assert sandbox.exec("ls /sys/class/net").stdout.split() == ["lo"]


def test_container_is_hardened_by_default(docker_backend, sandbox):
    info = docker_backend.api.inspect_container(sandbox.id)
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] > 0 and host["Memory"] > 0 and host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] > 0 and host["Init"] is True
    assert "/tmp" in host["Tmpfs"]
    assert info["Config"]["User"] == "agent"
    assert info["Config"]["Labels"]["regrow.managed"] == "1"
    assert info["Config"]["Labels"]["regrow.owner"] == docker_backend.owner
    capabilities = sandbox.exec("grep CapEff /proc/self/status").stdout.split()[1]
    assert int(capabilities, 16) == 0
