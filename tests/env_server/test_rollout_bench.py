"""`regrow bench rollouts` on the in-memory server: each task's pass rate, and the context tokens the sampler's turn
cache spared (none when it is off)."""

import pytest

from regrow.bench.options import RolloutBenchOptions
from regrow.bench.rollouts import run_rollout_bench
from tests.task_fixture import DEMO_TASK_ID

pytestmark = pytest.mark.train


def _bench(server, turn_cache: bool) -> dict:
    options = RolloutBenchOptions(
        env=server.http_url,
        workers=2,
        episodes=2,
        group_size=2,
        max_turns=3,
        max_turn_tokens=24,
        task_id=[DEMO_TASK_ID],
        turn_cache=turn_cache,
    )
    return run_rollout_bench(options)


def test_rollouts_report_each_tasks_pass_rate_and_the_tokens_the_turn_cache_spared(memory_server):
    cached = _bench(memory_server, turn_cache=True)
    assert set(cached["pass_rate_by_task"]) == {DEMO_TASK_ID}
    assert cached["turns_per_episode"] > 1  # a random policy's turns parse as no call, so its episodes go on
    assert cached["reused_tokens"] > cached["prefilled_tokens"] > 0  # a later turn runs only the env's reply
    # a benchmark's episodes are not training ones: the frontier sampler of a run on this server reads past them
    assert memory_server.runtime.traces.read("SELECT DISTINCT origin FROM episodes") == [("evaluation",)]

    uncached = _bench(memory_server, turn_cache=False)
    assert uncached["reused_tokens"] == 0 and uncached["prefilled_tokens"] > cached["prefilled_tokens"]
