"""The one periodic loop: it keeps calling after a failing pass, and stops when told, even before it started."""

import threading

import pytest

from sandbox.lifecycle.periodic import Periodic


def test_a_failing_pass_is_logged_and_the_next_still_comes(caplog):
    calls, done = [], threading.Event()

    def action():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("engine away")
        done.set()

    loop = Periodic("test-loop", 0.01, action).start()
    assert done.wait(5), "the loop died with its first failure"
    loop.stop()
    assert not loop.running
    assert "test-loop: a periodic pass failed" in caplog.text


def test_stop_is_safe_before_start_and_twice_and_a_bad_interval_is_refused():
    loop = Periodic("idle", 60, lambda: None)
    loop.stop()
    loop.stop()
    with pytest.raises(ValueError, match="interval must be positive"):
        Periodic("spin", 0, lambda: None)
