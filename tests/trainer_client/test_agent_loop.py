"""The agent loop against the scripted env over a real WebSocket: calls, env mask, hints and limits."""

import pytest

from proto import CodingObservation, tool_specs
from proto.transcript import initial_messages, tool_response_message
from tests.trainer_client.conftest import ScriptedSampler
from trainer_client.env.client import EnvClient
from trainer_client.rollout.agent_loop import EpisodeLimits, play_episode

RUN_LS = '<tool_call>\n{"name": "run", "arguments": {"command": "ls"}}\n</tool_call>'
WRITE = '<tool_call>\n{"name": "write_file", "arguments": {"path": "calc/ops.py", "content": "x = 1"}}\n</tool_call>'
SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


async def play(url, tokenizer, episode_tokens, texts, limits=EpisodeLimits()):
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, texts)
    client = EnvClient(url, max_connections=2)
    try:
        trajectory = await play_episode(client, sampler, episode_tokens, limits, {"task_id": "calc"})
    finally:
        await client.aclose()
    return trajectory, sampler


async def test_env_mask_marks_exactly_the_policy_tokens(scripted_env_url, tokenizer, episode_tokens):
    trajectory, _ = await play(scripted_env_url, tokenizer, episode_tokens, [RUN_LS, SUBMIT])

    assert trajectory.done and trajectory.stop_reason == "done" and len(trajectory.turns) == 2
    first, second = trajectory.turns
    expected = [0] * len(trajectory.completion_ids)
    for turn in trajectory.turns:
        expected[turn.start : turn.end] = [1] * (turn.end - turn.start)
    assert trajectory.env_mask == expected
    assert first.start == 0 and second.end == len(trajectory.completion_ids)
    assert all(lp == 0.0 for lp, m in zip(trajectory.logprobs, trajectory.env_mask) if m == 0)
    assert all(lp == -0.5 for lp, m in zip(trajectory.logprobs, trajectory.env_mask) if m == 1)
    assert episode_tokens.decode(trajectory.completion_ids[first.start : first.end]) == RUN_LS


async def test_token_context_equals_the_chat_template_rendering(scripted_env_url, tokenizer, episode_tokens):
    trajectory, sampler = await play(scripted_env_url, tokenizer, episode_tokens, [RUN_LS, SUBMIT])

    # What the policy saw before turn 2 is exactly the template's rendering of the conversation so far.
    messages = initial_messages("Implement clamp in calc/ops.py.", tool_specs())
    messages += [
        {"role": "assistant", "content": RUN_LS},
        tool_response_message([CodingObservation(output="ran ls", exit_code=0)]),
    ]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert sampler.contexts[1] == list(rendered)
    assert trajectory.prompt_ids + trajectory.completion_ids[: trajectory.turns[1].start] == list(rendered)


async def test_malformed_call_goes_to_the_env_and_its_feedback_hints_that_same_turn(
    scripted_env_url, tokenizer, episode_tokens
):
    trajectory, _ = await play(
        scripted_env_url, tokenizer, episode_tokens, ["<tool_call>{not json}</tool_call>", SUBMIT]
    )

    first, second = trajectory.turns
    assert first.calls == 1 and first.parse_errors and "not valid JSON" in first.parse_errors[0]
    assert first.feedback and "could not be read" in first.feedback
    assert second.feedback == "2 tests fail"  # the test summary after submit is feedback on the last turn
    assert trajectory.hinted_turns == [first, second]
    # Each turn's hint goes right before that turn's own generation prompt; the first turn's is in the prompt.
    ids = trajectory.prompt_ids + trajectory.completion_ids
    offset = len(trajectory.prompt_ids)
    for turn in (first, second):
        assert tokenizer.decode(ids[offset + turn.prompt_at : offset + turn.start]) == "<|im_start|>assistant\n"
    assert first.prompt_at < 0 < second.prompt_at


async def test_distilled_tokens_are_those_of_the_attempt_the_hint_is_about(scripted_env_url, tokenizer, episode_tokens):
    from trainer_client.rollout.rows import hinted_turns

    trajectory, _ = await play(scripted_env_url, tokenizer, episode_tokens, ["<tool_call>{not json}</tool_call>"])

    hinted = hinted_turns(trajectory, episode_tokens)
    assert len(hinted) == len(trajectory.turns) == 2
    for turn, record in zip(hinted, trajectory.turns):
        assert (turn.start, turn.end) == (record.start, record.end)
        assert record.feedback in tokenizer.decode(turn.hint_ids)


async def test_a_reply_without_any_tool_call_is_sent_not_dropped(scripted_env_url, tokenizer, episode_tokens):
    trajectory, _ = await play(scripted_env_url, tokenizer, episode_tokens, ["I think the bug is in clamp.", SUBMIT])

    assert trajectory.turns[0].calls == 1
    assert "no <tool_call>" in trajectory.turns[0].parse_errors[0]
    assert trajectory.turns[0].feedback is not None


async def test_multiple_calls_in_one_turn_are_sent_in_order(scripted_env_url, tokenizer, episode_tokens):
    trajectory, _ = await play(scripted_env_url, tokenizer, episode_tokens, [WRITE + "\n" + RUN_LS, SUBMIT])

    first = trajectory.turns[0]
    assert first.calls == 2
    response = tokenizer.decode(trajectory.completion_ids[first.end : trajectory.turns[1].start])
    assert response.index("wrote calc/ops.py") < response.index("ran ls")
    assert trajectory.reward == 1.0  # the write reached the env before submit


async def test_unknown_tool_draws_feedback(scripted_env_url, tokenizer, episode_tokens):
    unknown = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    trajectory, _ = await play(scripted_env_url, tokenizer, episode_tokens, [unknown, SUBMIT])

    assert "unknown tool 'rm_rf'" in trajectory.turns[0].feedback
    assert trajectory.turns[0].parse_errors == []


async def test_turn_limit_stops_the_episode(scripted_env_url, tokenizer, episode_tokens):
    trajectory, _ = await play(scripted_env_url, tokenizer, episode_tokens, [RUN_LS] * 5, EpisodeLimits(max_turns=3))

    assert len(trajectory.turns) == 3 and not trajectory.done
    assert trajectory.stop_reason == "turn_limit" and trajectory.reward == 0.0


async def test_an_episode_cut_off_before_submit_is_graded_as_it_stands(scripted_env_url, tokenizer, episode_tokens):
    """As TRL's path grades one (trl_environment.get_reward): before, the loop left it ungraded at 0 and the server
    aborted it, so a policy that fixed the code and ran out of turns before `submit` earned nothing."""
    trajectory, _ = await play(
        scripted_env_url, tokenizer, episode_tokens, [WRITE, RUN_LS, RUN_LS], EpisodeLimits(max_turns=2)
    )

    assert len(trajectory.turns) == 2 and not trajectory.done and trajectory.stop_reason == "turn_limit"
    assert trajectory.reward == 1.0  # the scripted grader's verdict on the workspace the policy left


async def test_token_budget_stops_the_episode(scripted_env_url, tokenizer, episode_tokens):
    limits = EpisodeLimits(max_turns=50, max_completion_tokens=120, min_turn_tokens=8)
    trajectory, _ = await play(scripted_env_url, tokenizer, episode_tokens, [RUN_LS] * 50, limits)

    assert trajectory.stop_reason == "token_budget" and not trajectory.done
    assert len(trajectory.completion_ids) <= 120


@pytest.mark.parametrize("malformed", ['<tool_call>["run"]</tool_call>', '<tool_call>{"arguments": {}}</tool_call>'])
async def test_json_that_is_not_a_named_call_is_malformed(scripted_env_url, tokenizer, episode_tokens, malformed):
    trajectory, _ = await play(scripted_env_url, tokenizer, episode_tokens, [malformed, SUBMIT])

    assert trajectory.turns[0].parse_errors and trajectory.turns[0].feedback
