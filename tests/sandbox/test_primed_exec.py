"""A primed exec (the command's process started ahead, fed at exec time) runs a command as a plain exec runs it:
the same directory, environment, stdin, signal dispositions, limits, output, exit code and timeout; a runner that
died before its command hands the command to a plain start, which runs it once."""

import time

import pytest

from sandbox.layout import WORKSPACE

pytestmark = pytest.mark.docker

# What a command's process inherits, beside its pids and its marker variable (new for every exec).
_INHERITED = (
    "env | grep -v '^REGROW_EXEC=' | sort; pwd; umask; ulimit -a; id; ls -l /proc/self/fd/0 | sed 's/.* -> //';"
    " grep -E '^(SigIgn|SigBlk|SigCgt|CapEff|NoNewPrivs)' /proc/self/status"
)


def _processes(sandbox) -> list[str]:
    """Every process's command line, its words joined by spaces."""
    each = "for p in /proc/[0-9]*; do tr '\\0\\n' '  ' < $p/cmdline; echo; done"
    listed = sandbox.exec(["sh", "-c", each], user="root")
    return [line.strip() for line in listed.stdout.splitlines()]


def _runners(sandbox) -> int:
    """How many primed runners wait in the sandbox: python3 with the runner's source."""
    return sum(line.startswith("python3 -c") and "regrow-runner-took" in line for line in _processes(sandbox))


@pytest.fixture
def sandbox(docker_backend, base_image):
    with docker_backend.create(base_image, workdir=WORKSPACE) as made:
        yield made


def test_a_primed_command_inherits_what_a_plain_one_does(sandbox):
    plain = sandbox.exec(_INHERITED, cwd="/tmp", env={"X": "1"})
    sandbox.prime_exec()
    primed = sandbox.exec(_INHERITED, cwd="/tmp", env={"X": "1"})
    assert "SigIgn:\t0000000000000000" in plain.stdout and "X=1" in plain.stdout
    assert primed.stdout == plain.stdout and primed.stderr == plain.stderr == ""


def test_a_primed_command_answers_as_a_plain_one(sandbox):
    cases = [
        ("echo out; echo err >&2; exit 3", {}),
        ("yes | head -c 5", {}),  # yes must die of SIGPIPE, not loop on EPIPE
        ("cat", {}),  # stdin is empty, not the runner's pipe
    ]
    for command, options in cases:
        plain = sandbox.exec(command, timeout=10, **options)
        sandbox.prime_exec()
        primed = sandbox.exec(command, timeout=10, **options)
        assert (primed.exit_code, primed.stdout, primed.stderr) == (plain.exit_code, plain.stdout, plain.stderr), (
            command
        )
    # A missing directory: 126 and the engine's reason, in the engine's words where it gives them
    plain = sandbox.exec("pwd", cwd="/nonexistent")
    sandbox.prime_exec()
    primed = sandbox.exec("pwd", cwd="/nonexistent")
    reason = 'chdir to cwd ("/nonexistent") set in config.json failed: no such file or directory'
    assert plain.exit_code == primed.exit_code == 126 and reason in plain.stdout and reason in primed.stdout
    assert _runners(sandbox) == 0  # each took its command


def test_a_primed_command_times_out_and_is_swept_like_a_plain_one(sandbox):
    sandbox.prime_exec()
    result = sandbox.exec("sleep 30 & sleep 30", timeout=1)
    assert result.timed_out and result.duration_s < 15
    assert "sleep 30" not in _processes(sandbox)


def test_a_runner_killed_before_its_command_hands_it_to_a_plain_start(sandbox):
    sandbox.prime_exec()
    time.sleep(0.5)
    assert _runners(sandbox) == 1
    runner = sandbox.exec(
        ["sh", "-c", "for p in /proc/[0-9]*; do [ $(cat $p/comm) = python3 ] && echo ${p#/proc/}; done"]
    )
    sandbox.exec(["kill", "-9", runner.stdout.strip()])
    result = sandbox.exec(f"echo ran >> {WORKSPACE}/count; cat {WORKSPACE}/count")
    assert (result.exit_code, result.stdout) == (0, "ran\n")  # it ran, once


def test_an_unused_runner_ends_with_its_sandbox_or_a_new_prime(sandbox):
    sandbox.prime_exec()
    sandbox.prime_exec()
    time.sleep(0.5)
    assert _runners(sandbox) == 1
    assert sandbox.exec("id -u", user="root").stdout == "0\n"  # another user's command leaves it waiting
    assert _runners(sandbox) == 1
