"""Fixtures of the trainer tests: the tiny tokenizer and policy, a scripted policy and the scripted env."""

import asyncio

import pytest

from trainer_client.rollout.agent_loop import EpisodeLimits, GeneratedTurn, play_episode


class ScriptedSampler:
    """Plays fixed turn texts in order (each closed by the end-of-turn token) and records its contexts."""

    def __init__(self, tokenizer, end_of_turn_id: int, texts: list[str], logprob: float = -0.5):
        self.tokenizer = tokenizer
        self.end_of_turn_id = end_of_turn_id
        self.texts = list(texts)
        self.logprob = logprob
        self.contexts: list[list[int]] = []
        self.version = 0

    async def generate(self, context_ids: list[int], max_new_tokens: int) -> GeneratedTurn:
        self.contexts.append(list(context_ids))
        text = self.texts.pop(0) if self.texts else '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: max_new_tokens - 1] + [self.end_of_turn_id]
        return GeneratedTurn(ids=ids, logprobs=[self.logprob] * len(ids), finished=True)


@pytest.fixture(scope="session")
def tokenizer(train_extra):
    from tests.trainer_client.tiny_policy import train_tokenizer

    return train_tokenizer()


@pytest.fixture(scope="session")
def episode_tokens(tokenizer):
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer

    return EpisodeTokenizer(tokenizer)


@pytest.fixture(scope="session")
def scripted_env_url():
    from tests.trainer_client.scripted_env import serve_scripted_env

    with serve_scripted_env(max_sessions=8) as url:
        yield url


def play_scripts(url: str, tokenizer, episode_tokens, scripts: list[list[str]]) -> list:
    """One episode of the scripted env's `calc` task per script of turn texts, in order: the trajectories."""
    from trainer_client.env.client import EnvClient

    async def play_all():
        client = EnvClient(url, max_connections=4)
        try:
            return [
                await play_episode(
                    client,
                    ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, script),
                    episode_tokens,
                    EpisodeLimits(),
                    {"task_id": "calc"},
                )
                for script in scripts
            ]
        finally:
            await client.aclose()

    return asyncio.run(play_all())
