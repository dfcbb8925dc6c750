"""The env client's guarantees: a clear error at capacity, no reuse of a timed-out connection, pooling."""

import asyncio
import threading
import time
from pathlib import Path

import pytest

from proto import ToolCall
from tests.trainer_client.conftest import ScriptedSampler
from tests.trainer_client.scripted_env import serve_scripted_env
from trainer_client.env.client import EnvClient
from trainer_client.env.errors import EnvAtCapacity, EnvTransportError, refusal_code
from trainer_client.rollout.agent_loop import EpisodeLimits
from trainer_client.rollout.stream import RolloutStream
from trainer_client.rollout.stream_settings import StreamSettings


async def test_capacity_error_names_the_limit_and_the_remedy():
    with serve_scripted_env(max_sessions=1) as url:
        client = EnvClient(url, max_connections=2)
        async with client.episode(task_id="calc"):
            with pytest.raises(EnvAtCapacity, match="at capacity .*1 of 1 sessions.*fewer rollout workers"):
                async with client.episode(task_id="calc"):
                    pass
        await client.aclose()


@pytest.mark.parametrize(
    ("code", "message", "finest"),
    [
        ("EXECUTION_ERROR", "CAPACITY_REACHED: all 4 episode slots are busy; retry later", "CAPACITY_REACHED"),
        ("EXECUTION_ERROR", "ENGINE_UNREACHABLE: the Docker engine does not answer", "ENGINE_UNREACHABLE"),
        ("EXECUTION_ERROR", "unknown task 'x': CAPACITY_REACHED: no", "EXECUTION_ERROR"),
        ("EXECUTION_ERROR", "ValueError: bad seed", "EXECUTION_ERROR"),
        ("CAPACITY_REACHED", "Server at capacity", "CAPACITY_REACHED"),
        ("VALIDATION_ERROR", "SANDBOX_GONE: not ours to promote", "VALIDATION_ERROR"),
    ],
)
def test_the_code_leading_an_execution_error_is_the_refusals_code(code, message, finest):
    assert refusal_code(code, message) == finest


async def test_timed_out_connection_is_dropped_and_the_next_episode_is_clean(scripted_env_url):
    client = EnvClient(scripted_env_url, max_connections=1, request_timeout=0.5)
    with pytest.raises(EnvTransportError, match="no reply to 'step'"):
        async with client.episode(task_id="calc") as episode:
            await episode.step(ToolCall(tool="run", args={"command": "sleep 1"}))
    await asyncio.sleep(1.0)  # the late reply to the timed-out step arrives now, on the dropped socket
    async with client.episode(task_id="calc") as episode:
        assert episode.first.problem_statement  # a reset observation, not the stale "ran sleep 1"
        reply = await episode.step(ToolCall(tool="run", args={"command": "echo hi"}))
        assert reply.output == "ran echo hi"
    await client.aclose()


async def test_finished_episodes_reuse_their_connection(scripted_env_url):
    client = EnvClient(scripted_env_url, max_connections=1)
    for _ in range(2):
        async with client.episode(task_id="calc") as episode:
            await episode.step(ToolCall(tool="submit"))
    assert len(client._idle) == 1
    await client.aclose()


async def test_unreachable_server_is_a_transport_error_with_a_hint():
    client = EnvClient("http://127.0.0.1:9", max_connections=1, open_timeout=2)
    with pytest.raises(EnvTransportError, match="is `regrow serve` running"):
        async with client.episode(task_id="calc"):
            pass


def test_stream_hands_out_whole_groups_of_one_task(scripted_env_url, tokenizer, episode_tokens):
    submit = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [submit] * 100)
    options = iter([{"task_id": f"task-{n}"} for n in range(100)])
    stream = RolloutStream(
        scripted_env_url, sampler, episode_tokens, EpisodeLimits(), options, StreamSettings(workers=3, group_size=2)
    )
    with stream:
        groups = stream.next_groups(3, policy_version=0, timeout=60)

    assert len(groups) == 3 and all(len(group) == 2 for group in groups)
    for group in groups:
        assert len({t.reset_options["task_id"] for t in group}) == 1 and all(t.done for t in group)


def test_a_group_drawn_by_a_sampler_plays_the_task_its_first_reset_drew(scripted_env_url, tokenizer, episode_tokens):
    """The frontier sampler's draw depends on pass rates that change between a group's resets: the stream pins the
    group to its first draw (before, a group of 3 here played 3 tasks)."""
    submit = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [submit] * 100)
    options = iter([{"seed": n, "sampler": "frontier"} for n in range(100)])
    stream = RolloutStream(
        scripted_env_url, sampler, episode_tokens, EpisodeLimits(), options, StreamSettings(workers=3, group_size=3)
    )
    with stream:
        groups = stream.next_groups(3, policy_version=0, timeout=60)
    drawn = [{t.task_id for t in group} for group in groups]
    assert all(len(tasks) == 1 and next(iter(tasks)).startswith("drawn-") for tasks in drawn), drawn
    assert len(set.union(*drawn)) == 3  # each group its own draw


def test_a_prefix_group_starts_every_member_from_the_prefix_and_a_refused_one_plays_plainly(
    scripted_env_url, tokenizer, episode_tokens
):
    submit = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [submit] * 100)
    options = iter(
        [
            {"prefix_of": "ep-1", "prefix_steps": 1, "fallback": {"task_id": "calc"}},
            {"prefix_of": "refused", "prefix_steps": 1, "fallback": {"task_id": "plain"}},
        ]
    )
    stream = RolloutStream(
        scripted_env_url, sampler, episode_tokens, EpisodeLimits(), options, StreamSettings(workers=2, group_size=2)
    )
    with stream:
        groups = stream.next_groups(2, policy_version=0, timeout=60)
        refused = stream.stats.prefix_refused
    by_task = {group[0].task_id: group for group in groups}
    assert set(by_task) == {"prefixed", "plain"} and all(len({t.task_id for t in g}) == 1 for g in groups)
    for trajectory in by_task["prefixed"]:  # the prefix is context: in the prompt, never in the completion
        assert "return v" in tokenizer.decode(trajectory.prompt_ids)
        assert "fallback" not in trajectory.reset_options
    assert refused >= 1


def test_stream_drops_groups_staler_than_allowed(scripted_env_url, tokenizer, episode_tokens):
    submit = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [submit] * 100)
    options = iter([{"task_id": f"task-{n}"} for n in range(100)])
    stream = RolloutStream(
        scripted_env_url,
        sampler,
        episode_tokens,
        EpisodeLimits(),
        options,
        StreamSettings(workers=2, group_size=2, max_staleness=1, max_buffered_groups=2),
    )
    with stream:
        stream.next_groups(2, policy_version=0, timeout=60)
        deadline = time.monotonic() + 60
        while stream.stats.groups_queued < 4 and time.monotonic() < deadline:  # two more buffered from version 0
            time.sleep(0.05)
        assert stream.stats.groups_queued >= 4
        sampler.version = 5  # five updates later, new episodes start from version 5
        fresh = stream.next_groups(1, policy_version=5, timeout=60)

    assert stream.stats.groups_dropped_stale >= 1
    assert all(t.policy_version == 5 for t in fresh[0])


def test_the_stream_stops_its_workers_every_time(tokenizer, episode_tokens):
    submit = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    with serve_scripted_env(max_sessions=64) as url:  # the server frees a closed session a moment later
        for _ in range(10):  # a cancel racing an instant reply was lost now and then, and the thread lived on
            sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [submit] * 100)
            options = iter([{"task_id": f"task-{n}"} for n in range(100)])
            stream = RolloutStream(url, sampler, episode_tokens, EpisodeLimits(), options, StreamSettings(workers=2))
            started = time.monotonic()
            with stream:
                stream.next_groups(1, policy_version=0, timeout=60)
            assert time.monotonic() - started < 15
            alive = [
                thread for thread in threading.enumerate() if thread.name == "rollout-workers" and thread.is_alive()
            ]
            assert not alive


FIX = '<tool_call>\n{"name": "write_file", "arguments": {"path": "calc/ops.py", "content": "x = 1\\n"}}\n</tool_call>'
SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


def test_a_group_whose_rewards_are_all_equal_is_dropped_and_another_played_until_the_patience_runs_out(
    scripted_env_url, tokenizer, episode_tokens
):
    """Before, a group of all-0 rewards reached the trainer: no GRPO gradient, yet its tokens diluted the step. One
    worker plays the turns in order: two uniform groups (0, 0), one mixed (write + submit = 1, then 0), then uniform
    groups past the patience of 2, the third of which is kept."""
    turns = [SUBMIT, SUBMIT, SUBMIT, SUBMIT, FIX, SUBMIT, SUBMIT] + [SUBMIT] * 6
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, turns)
    options = iter([{"task_id": f"task-{n}"} for n in range(100)])
    stream = RolloutStream(
        scripted_env_url, sampler, episode_tokens, EpisodeLimits(), options,
        StreamSettings(workers=1, group_size=2, drop_uniform=True, uniform_patience=2),
    )  # fmt: skip
    with stream:
        mixed, kept = stream.next_groups(2, policy_version=0, timeout=60)
        stats = stream.stats
    assert sorted(t.reward for t in mixed) == [0.0, 1.0] and mixed[0].task_id == "task-2"
    assert [t.reward for t in kept] == [0.0, 0.0] and kept[0].task_id == "task-5"
    assert (stats.groups_dropped_uniform, stats.groups_kept_uniform) == (4, 1)


def test_uniform_groups_are_dropped_by_default_only_when_rlvr_is_the_only_channel():
    from trainer_client.train.settings import TrainSettings

    url = "http://127.0.0.1:9"
    assert TrainSettings(env=url).drops_uniform_groups
    assert not TrainSettings(env=url, alpha_sdpo=0.5).drops_uniform_groups  # SDPO learns from feedback turns
    assert TrainSettings(env=url, alpha_sdpo=0.5, uniform_groups="drop").drops_uniform_groups
    assert not TrainSettings(env=url, uniform_groups="keep").drops_uniform_groups


def test_a_run_with_prefix_sampling_asks_its_episodes_to_track_their_commands_effects():
    """A prefix can pass a command only where the episode recorded its effect, which the server does only when asked."""
    from trainer_client.train.settings import TrainSettings
    from trainer_client.train.training_stream import run_reset_tags, training_run_id

    url = "http://127.0.0.1:9"
    plain = run_reset_tags(TrainSettings(env=url, output_dir=Path("runs/a")))
    assert plain == {"origin": "training", "run_id": training_run_id(Path("runs/a"))}
    prefixed = run_reset_tags(TrainSettings(env=url, output_dir=Path("runs/a"), prefix_sampling=True))
    assert prefixed == {**plain, "track_effects": True}


def test_every_reset_of_a_stream_carries_its_origin_and_run(scripted_env_url, tokenizer, episode_tokens):
    """The frontier sampler reads a run's own training episodes; before, a trainer's resets said nothing of either."""
    from tests.trainer_client.scripted_env import ScriptedCodingEnv
    from trainer_client.train.training_stream import training_run_id

    run_id = training_run_id(Path("runs/a"))
    assert run_id == training_run_id(Path("runs/a").resolve()) != training_run_id(Path("runs/b"))
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [SUBMIT] * 10)
    # Ids of this test's own: a reset left over from an earlier test's stream can reach the shared server late.
    options = iter([{"task_id": f"tagged-{n}"} for n in range(100)])
    tags = {"origin": "training", "run_id": run_id}
    ScriptedCodingEnv.reset_tags.clear()
    stream = RolloutStream(
        scripted_env_url,
        sampler,
        episode_tokens,
        EpisodeLimits(),
        options,
        StreamSettings(workers=1, group_size=2, reset_tags=tags),
    )
    with stream:
        stream.next_groups(1, policy_version=0, timeout=60)
    own = [tags for task_id, *tags in ScriptedCodingEnv.reset_tags if str(task_id).startswith("tagged-")]
    assert own[:2] == [["training", run_id]] * 2
