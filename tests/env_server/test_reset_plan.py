"""A reset decides what it plays once, before it ends the running episode: the task it draws is the task it plays."""

from env_server.environment import CodingEnvironment


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
