"""The frontier sampler's draws: nearest one half first, a share for little-seen tasks, no task starved, the same
draws for the same seed (no engine); and through the server, over HTTP and gRPC, from pass rates in its trace
store."""

import random
import shutil
from collections import Counter
from datetime import UTC, datetime

import grpc
import httpx
import pytest

from env_server.frontier_sampler import FLOOR, Graded, PassRates, frontier_pick
from env_server.lifecycle.server import start_in_background
from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from proto.observations import RewardDetails
from proto.tasks import TaskRecord
from proto.traces import EpisodeTrace
from tests.env_server.conftest import make_settings, memory_backend

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


@pytest.fixture(scope="module")
def three_task_server(memory_task_store, tmp_path_factory):
    """The demo task and two copies, graded 10 times each in the trace store: always solved, solved half the time,
    never solved."""
    store = tmp_path_factory.mktemp("three-tasks")
    shutil.copytree(memory_task_store, store, dirs_exist_ok=True)
    record = TaskRecord.model_validate_json((store / "tasks.jsonl").read_text().splitlines()[0])
    for copy in ("calc__half", "calc__never"):
        shutil.copytree(store / "hidden" / record.instance_id, store / "hidden" / copy)
        with (store / "tasks.jsonl").open("a") as tasks:
            tasks.write(record.model_copy(update={"instance_id": copy}).model_dump_json() + "\n")
    settings = make_settings(
        store, tmp_path_factory.mktemp("frontier-srv"), host="127.0.0.1", port=0, grpc_port=0, max_episodes=64
    )
    settings = settings.model_copy(update={"frontier_explore_share": 0.0})
    with start_in_background(settings, memory_backend()) as running:
        now = datetime.now(UTC)
        for task, passes in ((record.instance_id, 10), ("calc__half", 5), ("calc__never", 0)):
            for index in range(10):
                episode = f"{task}-{index}"
                running.runtime.traces.start_episode(
                    EpisodeTrace(episode_id=episode, task_id=task, problem_statement="", started_at=now)
                )
                details = RewardDetails(
                    reward=float(index < passes), mode="binary", f2p_passed=0, f2p_total=1, p2p_passed=0, p2p_total=0
                )
                running.runtime.traces.end_episode(episode, "submitted", now, details)
        yield running, record.instance_id


def _drawn(server, reset) -> str:
    episode = server.runtime.get(reset())
    server.runtime.abort(episode, "the test only reads which task was drawn")
    return episode.task.id


def test_a_reset_through_the_server_draws_by_recorded_pass_rate(three_task_server):
    server, solved = three_task_server
    with httpx.Client(base_url=server.http_url, timeout=60) as http:

        def http_reset(seed: int, **extra) -> str:
            return http.post("/reset", json={"seed": seed, **extra}).json()["metadata"]["episode_id"]

        frontier = Counter(_drawn(server, lambda seed=seed: http_reset(seed, sampler="frontier")) for seed in range(40))
        uniform = Counter(_drawn(server, lambda seed=seed: http_reset(seed)) for seed in range(40))
        first = [_drawn(server, lambda seed=seed: http_reset(seed, sampler="frontier")) for seed in range(10)]
        again = [_drawn(server, lambda seed=seed: http_reset(seed, sampler="frontier")) for seed in range(10)]
        unknown = http.post("/reset", json={"seed": 1, "sampler": "hardest"})
    assert frontier["calc__half"] >= 30, frontier  # p(1-p) = 0.25 against the floor of the solved and never-solved
    assert uniform["calc__half"] <= 25 and uniform[solved] > 5 and uniform["calc__never"] > 5, uniform
    assert first == again  # the same seeds, the same draws
    assert unknown.status_code >= 400 and "uniform or frontier" in unknown.text

    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = pb_grpc.CodingEnvStub(channel)
        over_grpc = Counter(
            _drawn(server, lambda seed=seed: stub.Reset(pb.ResetRequest(seed=seed, sampler="frontier")).episode_id)
            for seed in range(20)
        )
    assert over_grpc["calc__half"] >= 15, over_grpc
