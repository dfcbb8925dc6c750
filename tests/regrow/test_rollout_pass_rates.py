"""`regrow bench rollouts` reports each task's pass rate: the cpu-overfit recipe picks its tasks by them."""

from regrow.bench.rollouts import pass_rate_by_task
from trainer_client.rollout.agent_loop import Trajectory


def _played(task_id: str, reward: float) -> Trajectory:
    return Trajectory(prompt_ids=[1], task_id=task_id, reward=reward)


def test_each_tasks_pass_rate_counts_only_full_rewards():
    played = [_played("b", 1.0), _played("a", 0.0), _played("b", 0.5), _played("a", 1.0), _played("b", 1.0)]
    assert pass_rate_by_task(played) == {"a": 0.5, "b": 0.667}
