"""Prefix sampling's plan (no env): a group that passed or failed whole makes its task's next group start from a
prefix of an episode with the other outcome; a mixed group plans nothing; the prefix shows as the policy's turns."""

import itertools

from proto.transcript import prefix_messages
from trainer_client.rollout.agent_loop import Trajectory, TurnRecord
from trainer_client.rollout.prefix_planner import FALLBACK, PrefixPlanner


def episode(task: str, episode_id: str, reward: float, steps: int = 4, **options) -> Trajectory:
    turns = [TurnRecord(0, 1, "", 1, [], None, 0) for _ in range(steps)]
    return Trajectory(
        prompt_ids=[1], turns=turns, reward=reward, task_id=task, episode_id=episode_id, reset_options=options
    )


def test_a_group_that_fails_whole_starts_its_next_group_from_a_successful_prefix():
    planner = PrefixPlanner(({"seed": n} for n in itertools.count()), fraction=0.5)
    planner.observe([episode("a", "a-pass", 1.0, steps=6), episode("a", "a-fail", 0.0)])  # mixed: remembered only
    assert next(planner) == {"seed": 0}
    planner.observe([episode("a", "a-fail-2", 0.0), episode("a", "a-fail-3", 0.0)])
    assert next(planner) == {"prefix_of": "a-pass", "prefix_steps": 3, FALLBACK: {"task_id": "a"}}
    assert next(planner) == {"seed": 1}  # one prefix group per whole group


def test_a_group_that_passes_whole_starts_from_a_failed_prefix_and_a_prefix_episode_is_no_source():
    planner = PrefixPlanner(iter([{"seed": 9}] * 3), fraction=0.5)
    planner.observe([episode("b", "b-fail", 0.0, steps=2), episode("b", "b-pass", 1.0)])
    planner.observe([episode("b", "b-pass-2", 1.0), episode("b", "b-pass-3", 1.0)])
    assert next(planner)["prefix_of"] == "b-fail" and planner.planned == 1
    prefixed = episode("c", "c-pass-from-prefix", 1.0, prefix_of="x", prefix_steps=1)
    planner.observe([prefixed, episode("c", "c-fail", 0.0)])
    planner.observe([episode("c", "c-fail-2", 0.0), episode("c", "c-fail-3", 0.0)])
    assert next(planner) == {"seed": 9}  # c's only pass started from a prefix: nothing to give


def test_a_prefix_is_shown_as_the_policys_calls_and_the_envs_answers():
    history = [
        {"tool": "write_file", "args": {"content": "x = 1\n", "path": "a.py"}, "output": "wrote 6 bytes to a.py"},
        {"tool": "run", "args": {"command": "python a.py"}, "output": "", "exit_code": 0, "feedback": "hint"},
    ]
    messages = prefix_messages({"of": "e", "steps": 2, "history": history})
    assert [m["role"] for m in messages] == ["assistant", "user", "assistant", "user"]
    assert '"name": "write_file", "arguments": {"path": "a.py"' in messages[0]["content"]  # the canonical order
    assert "[exit code: 0]" in messages[3]["content"] and "hint" not in messages[3]["content"]
    assert prefix_messages(None) == []
