"""The frontier sampler's draws: nearest one half first, a share for little-seen tasks, no task starved, the same
draws for the same seed (no engine)."""

import random
from collections import Counter

import pytest

from env_server.frontier_sampler import FLOOR, Graded, PassRates, frontier_pick

GRADED = {
    "half": Graded(episodes=10, passed=5),
    "solved": Graded(episodes=10, passed=10),
    "failed": Graded(episodes=10, passed=0),
    "fresh": Graded(episodes=1, passed=1),
}
IDS = sorted(GRADED)


def draws(seed: int, n: int, explore_share: float) -> list[str]:
    rng = random.Random(seed)
    return [frontier_pick(IDS, GRADED, rng, explore_share, min_seen=4) for _ in range(n)]


def test_the_task_nearest_one_half_is_drawn_most_and_none_is_starved():
    counts = Counter(draws(0, 4000, explore_share=0.0))
    assert counts["fresh"] == 0  # no exploration asked for
    share = counts["half"] / 4000
    assert share == pytest.approx(0.26 / (0.26 + 2 * FLOOR), abs=0.03)
    assert counts["solved"] > 0 and counts["failed"] > 0  # all-pass and all-fail tasks still come up now and then


def test_the_exploration_share_goes_to_tasks_seen_fewer_than_min_seen_times():
    assert set(draws(1, 200, explore_share=1.0)) == {"fresh"}
    assert Counter(draws(2, 4000, explore_share=0.25))["fresh"] / 4000 == pytest.approx(0.25, abs=0.03)
    never_graded = [frontier_pick(["a", "b"], {}, random.Random(seed), 0.0, 4) for seed in range(50)]
    assert set(never_graded) == {"a", "b"}  # nothing known yet: every draw explores


def test_the_same_seed_gives_the_same_draws_whatever_order_the_ids_come_in():
    assert draws(7, 50, 0.2) == draws(7, 50, 0.2) != draws(8, 50, 0.2)
    rng_a, rng_b = random.Random(3), random.Random(3)
    assert frontier_pick(IDS, GRADED, rng_a, 0.2, 4) == frontier_pick(IDS[::-1], GRADED, rng_b, 0.2, 4)


def test_pass_rates_are_read_again_only_after_the_refresh_interval():
    reads = []
    rates = PassRates(lambda: reads.append(1) or {"a": Graded(2, 1)}, refresh_s=3600)
    assert rates.current() == rates.current() == {"a": Graded(2, 1)} and len(reads) == 1
