"""A reset decides what it plays once, before it ends the running episode: the task it draws is the task it plays."""

import pytest

from env_server.environment import CodingEnvironment
from env_server.lifecycle.reset_options import ResetOptions
from env_server.stepping.errors import BadResetOption


def test_a_reset_draws_its_task_once_and_plays_that_one(memory_runtime, monkeypatch):
    """Before, a reset drew a task to check that it could start, then drew again to start it: with the frontier
    sampler or twins the two draws could differ, and the pass rates were read twice."""
    draws = []
    pick = memory_runtime.store.pick

    def counted_pick(*args, **kwargs):
        draws.append(pick(*args, **kwargs))
        return draws[-1]

    monkeypatch.setattr(memory_runtime.store, "pick", counted_pick)
    env = CodingEnvironment(memory_runtime)
    try:
        env.reset(seed=3)
        assert [task.id for task in draws] == [env.state.task_id]
    finally:
        env.close()


def test_track_effects_is_true_or_false_and_anything_else_is_refused_with_its_name():
    assert ResetOptions.of(None, {"track_effects": True}).track_effects is True
    assert ResetOptions.of(None, {}).track_effects is None
    with pytest.raises(BadResetOption, match="track_effects must be true or false, not 'yes'"):
        ResetOptions.of(None, {"track_effects": "yes"})
