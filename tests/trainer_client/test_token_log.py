"""The trainer's token log: one EpisodeTokens line per played episode, for `regrow traces export --tokens`."""

import threading

from openenv.core.env_server import create_app

from proto import CodingObservation, EpisodeTokens, ToolCall
from tests.live_process import served_in_thread
from tests.trainer_client.conftest import ScriptedSampler
from tests.trainer_client.scripted_env import ScriptedCodingEnv
from trainer_client.rollout.agent_loop import EpisodeLimits, Trajectory
from trainer_client.rollout.stream import RolloutStream
from trainer_client.rollout.stream_settings import StreamSettings
from trainer_client.rollout.token_log import TokenLog


def _trajectory(episode_id: str | None, version: int = 0) -> Trajectory:
    trajectory = Trajectory(prompt_ids=[1, 2, 3], policy_version=version, episode_id=episode_id)
    trajectory.append([10, 11], [-0.5, -0.25], from_policy=True)
    trajectory.append([20], None, from_policy=False)
    return trajectory


def _records(path) -> list[EpisodeTokens]:
    return [EpisodeTokens.model_validate_json(line) for line in path.read_text().splitlines()]


def test_each_trajectory_is_one_episode_tokens_line_with_its_ids_logprobs_and_mask(tmp_path):
    path = tmp_path / "run" / "episode_tokens.jsonl"  # the folder does not exist yet
    log = TokenLog(path, model="smollm2")
    log.record(_trajectory("ep-1", version=2))

    assert _records(path) == [
        EpisodeTokens(
            episode_id="ep-1",
            model="smollm2",
            policy_version=2,
            prompt_ids=[1, 2, 3],
            completion_ids=[10, 11, 20],
            logprobs=[-0.5, -0.25, 0.0],
            env_mask=[1, 1, 0],
            reward=0.0,
        )
    ]
    assert log.written == 1


def test_with_the_tokenizer_a_line_carries_the_reward_and_each_hinted_turns_hint_ids(tmp_path, episode_tokens):
    from trainer_client.rollout.agent_loop import TurnRecord

    trajectory = _trajectory("ep-1")
    trajectory.reward = 0.5
    trajectory.turns = [
        TurnRecord(0, 2, "", 1, [], "edit text not found in calc/ops.py", prompt_at=-4),
        TurnRecord(3, 3, "", 0, [], None, prompt_at=2),  # no feedback: not SDPO's
    ]
    log = TokenLog(tmp_path / "episode_tokens.jsonl", tokens=episode_tokens)
    log.record(trajectory)

    (record,) = _records(log.path)
    assert record.reward == 0.5
    assert [(t.hint_at, t.start, t.end) for t in record.hinted_turns] == [(-4, 0, 2)]
    assert record.hinted_turns[0].hint_ids == episode_tokens.hint_ids("edit text not found in calc/ops.py")


def test_a_second_log_on_the_same_file_appends(tmp_path):
    path = tmp_path / "episode_tokens.jsonl"
    TokenLog(path).record(_trajectory("ep-1"))
    TokenLog(path).record(_trajectory("ep-2"))

    assert [record.episode_id for record in _records(path)] == ["ep-1", "ep-2"]


def test_a_trajectory_without_an_episode_id_is_counted_and_not_written(tmp_path):
    path = tmp_path / "episode_tokens.jsonl"
    log = TokenLog(path)
    log.record(_trajectory(None))
    log.record(_trajectory("ep-1"))

    assert [record.episode_id for record in _records(path)] == ["ep-1"]
    assert (log.written, log.skipped) == (1, 1)


def test_threads_writing_at_once_leave_whole_lines(tmp_path):
    path = tmp_path / "episode_tokens.jsonl"
    log = TokenLog(path)
    threads = [
        threading.Thread(target=lambda n=n: [log.record(_trajectory(f"ep-{n}-{i}")) for i in range(50)])
        for n in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len({record.episode_id for record in _records(path)}) == 200 and log.written == 200


class _EnvWithEpisodeIds(ScriptedCodingEnv):
    """The scripted env, answering a reset with its episode id as the real env server does."""

    def reset(self, seed=None, episode_id=None, task_id=None, **kwargs) -> CodingObservation:
        observation = super().reset(seed, episode_id, task_id, **kwargs)
        observation.metadata["episode_id"] = self.state.episode_id
        return observation


def test_the_stream_logs_every_episode_it_keeps_under_the_envs_episode_id(tmp_path, tokenizer, episode_tokens):
    submit = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [submit] * 100)
    options = iter([{"task_id": f"task-{n}"} for n in range(100)])
    log = TokenLog(tmp_path / "episode_tokens.jsonl")
    app = create_app(_EnvWithEpisodeIds, ToolCall, CodingObservation, max_concurrent_envs=8)
    with served_in_thread(app, "the scripted env server", ws="websockets-sansio") as url:
        stream = RolloutStream(
            url, sampler, episode_tokens, EpisodeLimits(), options, StreamSettings(workers=2), token_log=log
        )
        with stream:
            groups = stream.next_groups(2, policy_version=0, timeout=60)

    logged = {record.episode_id: record for record in _records(log.path)}
    kept = [trajectory for group in groups for trajectory in group]
    assert len(kept) == 8 and log.skipped == 0
    for trajectory in kept:
        assert trajectory.episode_id is not None and trajectory.episode_id.startswith("ep-")
        assert logged[trajectory.episode_id].completion_ids == trajectory.completion_ids
        assert logged[trajectory.episode_id].env_mask == trajectory.env_mask
