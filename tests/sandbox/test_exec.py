"""Commands: round trips, timeouts that leave nothing behind, output caps, decoding."""

import pytest

from sandbox import ExecTimeout
from sandbox.runtime.process_sweep import sweep_command


def test_exec_round_trip_reports_exit_code_cwd_and_env(sandbox):
    result = sandbox.exec(
        'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3', cwd="/workspace", env={"GREETING": "hi"}
    )
    assert result.exit_code == 3
    assert result.stdout == "hi from /workspace\n"
    assert result.stderr == "oops\n"
    assert not result.timed_out and not result.truncated


def test_exec_accepts_argv_without_a_shell(sandbox):
    result = sandbox.exec(["printf", "%s|", "a b", "$HOME"])
    assert result.stdout == "a b|$HOME|"


def test_exec_runs_as_the_unprivileged_agent_user(sandbox):
    assert sandbox.exec("id -u").stdout.strip() == "1000"
    assert sandbox.exec("touch /etc/owned").exit_code != 0


def _processes_matching(sandbox, needle: str) -> list[str]:
    listing = sandbox.exec("for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done", user="root")
    return [line for line in listing.stdout.splitlines() if needle in line]


def test_timeout_kills_whole_process_group(sandbox):
    result = sandbox.exec("sleep 1001 & sleep 1002 & sleep 1003", timeout=1)
    assert result.timed_out
    assert _processes_matching(sandbox, "sleep 100") == []


def test_timeout_also_kills_children_that_left_the_process_group(sandbox):
    result = sandbox.exec("setsid sleep 1004 & nohup setsid sh -c 'sleep 1005' >/dev/null 2>&1 & sleep 1006", timeout=1)
    assert result.timed_out
    assert _processes_matching(sandbox, "sleep 100") == []


@pytest.mark.parametrize("python", [True, False], ids=["python3", "shell-fallback"])
def test_sweep_ends_the_marked_processes_with_or_without_python3(sandbox, python):
    # a PATH with what the sweep and the exec wrapper need, and python3 only when asked for
    tools = "/usr/bin/timeout /bin/sh /bin/grep" + (" /usr/bin/python3" if python else "")
    sandbox.exec(f"mkdir -p /tmp/tools && ln -sf {tools} /tmp/tools/")
    sandbox.exec("setsid sleep 1007 >/dev/null 2>&1 &", env={"SWEEP_PROBE": "1"})
    sandbox.exec("setsid sleep 1008 >/dev/null 2>&1 &")  # unmarked: the sweep must leave it alone
    assert _processes_matching(sandbox, "sleep 1007")
    swept = sandbox.exec(sweep_command("SWEEP_PROBE=1"), env={"PATH": "/tmp/tools"})
    assert swept.exit_code == 0, swept.stderr
    assert _processes_matching(sandbox, "sleep 1007") == []
    assert _processes_matching(sandbox, "sleep 1008")


def test_raise_for_timeout_raises_typed_error_with_the_result(sandbox):
    result = sandbox.exec("sleep 30", timeout=0.5)
    with pytest.raises(ExecTimeout) as caught:
        result.raise_for_timeout()
    assert caught.value.result is result


def test_chatty_output_is_truncated_at_the_cap(sandbox):
    result = sandbox.exec("yes", timeout=2)
    assert result.truncated
    assert len(result.stdout) == sandbox.limits.output_cap_bytes
    assert result.stdout.startswith("y\ny\n")


def test_output_under_the_cap_is_not_flagged(sandbox):
    result = sandbox.exec("head -c 1000 /dev/zero | tr '\\0' x")
    assert len(result.stdout) == 1000 and not result.truncated


def test_binary_and_invalid_utf8_output_is_decoded_with_replacement(sandbox):
    result = sandbox.exec("printf 'ok\\377\\376end'")
    assert result.exit_code == 0
    assert result.stdout.startswith("ok") and result.stdout.endswith("end")
    assert "\ufffd" in result.stdout


def test_invalid_timeout_and_env_are_rejected_before_reaching_the_engine(sandbox):
    with pytest.raises(ValueError):
        sandbox.exec("true", timeout=-1)
    with pytest.raises(ValueError):
        sandbox.exec("true", env={"A=B": "x"})
