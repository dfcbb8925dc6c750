"""The frontier sampler's draws: nearest one half first, a share for little-seen tasks, no task starved, the same
draws for the same seed (no engine); and through the server, over HTTP and gRPC, from pass rates in its trace
store."""

import random
import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta

import grpc
import httpx
import pytest

from env_server.frontier_sampler import FLOOR, Graded, PassRates, frontier_pick
from env_server.server import start_in_background
from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from proto.observations import RewardDetails
from proto.tasks import TaskRecord
from proto.traces import EpisodeTrace
from tests.env_server.conftest import live_runtime, make_settings, memory_backend

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


def test_pass_rates_are_read_again_only_after_the_refresh_interval_and_per_run():
    reads = []
    rates = PassRates(lambda run: reads.append(run) or {"a": Graded(2, 1 if run else 0)}, refresh_s=3600)
    assert rates.current("r") == rates.current("r") == {"a": Graded(2, 1)}
    assert rates.current() == {"a": Graded(2, 0)} and reads == ["r", None]


def test_the_frontier_reads_the_drawing_runs_latest_training_episodes_alone(memory_task_store, tmp_path):
    """Before, every episode ever recorded counted: `regrow traces demo`'s oracle episodes at 1.0, evaluations,
    prefix resets and other runs' episodes, for all time."""
    start = datetime.now(UTC)
    with live_runtime(memory_backend(), memory_task_store, tmp_path, frontier_window=4) as runtime:
        numbered = iter(range(100))

        def graded(reward: float, origin: str = "training", run_id: str | None = "run-a", prefix_of=None) -> None:
            index = next(numbered)
            episode = EpisodeTrace(
                episode_id=f"e{index}", task_id="t", problem_statement="", started_at=start, origin=origin,
                run_id=run_id, prefix_of=prefix_of,
            )  # fmt: skip
            runtime.traces.start_episode(episode)
            details = RewardDetails(reward=reward, mode="binary", f2p_passed=0, f2p_total=1, p2p_passed=0, p2p_total=0)
            runtime.traces.end_episode(episode.episode_id, "submitted", start + timedelta(seconds=index), details)

        for reward in (0.0, 0.0, 1.0, 1.0, 1.0, 0.0):  # the first two fall out of the window of 4
            graded(reward)
        graded(1.0, origin="demonstration")
        graded(1.0, origin="evaluation")
        graded(1.0, origin="prefix", prefix_of="e0")
        graded(0.0, run_id="run-b")
        graded(1.0, run_id=None)
        assert runtime._graded("run-a") == {"t": Graded(episodes=4, passed=3)}
        assert runtime._graded("run-b") == {"t": Graded(episodes=1, passed=0)}
        assert runtime._graded(None) == {"t": Graded(episodes=1, passed=1)}
        assert runtime.traces.get_episode("e6").origin == "demonstration"
        assert runtime.traces.get_episode("e8").origin == "prefix"


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


def test_a_reset_says_its_origin_and_run_and_an_unknown_origin_is_refused(three_task_server):
    server, solved = three_task_server
    with httpx.Client(base_url=server.http_url, timeout=60) as http:
        reset = http.post("/reset", json={"task_id": solved, "origin": "evaluation", "run_id": "run-x"}).json()
        bogus = http.post("/reset", json={"task_id": solved, "origin": "bogus"})
    episode = server.runtime.get(reset["metadata"]["episode_id"])
    assert (episode.trace.origin, episode.trace.run_id) == ("evaluation", "run-x")
    server.runtime.abort(episode, "the test only reads its origin")
    assert bogus.status_code == 400 and "training, evaluation, demonstration" in bogus.text
    with grpc.insecure_channel(server.grpc_target) as channel:
        reply = pb_grpc.CodingEnvStub(channel).Reset(pb.ResetRequest(task_id=solved, origin="demonstration"))
    episode = server.runtime.get(reply.episode_id)
    assert (episode.trace.origin, episode.trace.run_id) == ("demonstration", None)
    server.runtime.abort(episode, "the test only reads its origin")


async def test_the_grpc_client_sends_every_reset_option_it_is_given(three_task_server):
    """Before, the trainer's gRPC client sent only the task, split and seed: `--sampler frontier`, prefix resets and
    an episode's origin were lost on that transport."""
    from trainer_client.env.grpc_client import GrpcConnection

    server, _ = three_task_server
    connection = await GrpcConnection.open(f"grpc://{server.grpc_target}", open_timeout=10, request_timeout=30)
    try:
        first = await connection.reset({"seed": 3, "sampler": "frontier", "origin": "evaluation", "run_id": "r"})
        # read while the connection is open: closing it ends its episodes, which raced this read under load
        episode = server.runtime.get(first.metadata["episode_id"])
    finally:
        await connection.close()
    assert (episode.trace.origin, episode.trace.run_id) == ("evaluation", "r")
