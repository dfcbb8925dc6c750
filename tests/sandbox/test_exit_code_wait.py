"""The exit code of an exec whose output has ended, from an engine that is slow to say the exec finished."""

import time

import pytest

from sandbox import DockerSandbox, Limits, SandboxGone
from sandbox.runtime import docker_sandbox as backend_module


class LaggingEngine:
    """Reports each exec as running for `lag_s` after its first inspection, as a loaded engine does."""

    def __init__(self, lag_s: float, exit_code: int | None = 7, container_running: bool = True):
        self.lag_s = lag_s
        self.exit_code = exit_code
        self.container_running = container_running
        self.first_seen: float | None = None
        self.inspections = 0

    def exec_inspect(self, exec_id: str) -> dict:
        self.inspections += 1
        now = time.monotonic()
        self.first_seen = self.first_seen or now
        if now - self.first_seen < self.lag_s:
            return {"Running": True, "ExitCode": None}
        return {"Running": False, "ExitCode": self.exit_code}

    def inspect_container(self, container_id: str) -> dict:
        running = self.container_running
        return {"State": {"Running": running, "Status": "running" if running else "exited"}}


def _sandbox(engine: LaggingEngine) -> DockerSandbox:
    return DockerSandbox(engine, "c0ffee", Limits(), "agent", remove=lambda _: None)  # type: ignore[arg-type]


def test_exit_code_waits_out_an_engine_that_lags_one_and_a_half_seconds():
    engine = LaggingEngine(lag_s=1.5)
    assert _sandbox(engine)._exit_code("exec1", deadline_hit=False) == 7
    # short polls, not a busy loop: at most one inspection per 10 ms of lag
    assert engine.inspections <= 150


def test_exit_code_is_minus_one_when_the_engine_never_reports_the_end(monkeypatch):
    monkeypatch.setattr(backend_module, "EXIT_CODE_WAIT_S", 0.3)
    engine = LaggingEngine(lag_s=3600)
    started = time.monotonic()
    assert _sandbox(engine)._exit_code("exec1", deadline_hit=False) == -1
    assert 0.3 <= time.monotonic() - started < 30


def test_exit_code_of_a_command_killed_at_its_deadline_is_124_without_asking():
    engine = LaggingEngine(lag_s=0)
    assert _sandbox(engine)._exit_code("exec1", deadline_hit=True) == 124
    assert engine.inspections == 0


def test_an_exec_stopped_without_a_code_in_a_dead_container_is_sandbox_gone_at_once():
    engine = LaggingEngine(lag_s=0, exit_code=None, container_running=False)
    started = time.monotonic()
    with pytest.raises(SandboxGone, match="stopped"):
        _sandbox(engine)._exit_code("exec1", deadline_hit=False)
    assert time.monotonic() - started < 5
