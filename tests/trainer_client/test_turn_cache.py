"""The sampler's turn cache: an episode's next turn prefills only its new tokens, and samples what a full forward
over the whole context would have given it."""

import pytest
import torch

from tests.trainer_client.tiny_policy import tiny_qwen2, train_tokenizer
from trainer_client.rollout.hf_sampler import HFTurnSampler
from trainer_client.rollout.turn_cache import MIN_REUSED_TOKENS, TurnCache

pytestmark = pytest.mark.train


def _context(seed: int, length: int) -> list[int]:
    return [50 + (seed * 31 + i * 7) % 400 for i in range(length)]


def _full_forward_logprobs(model, context: list[int], ids: list[int]) -> torch.Tensor:
    """Each of `ids`' logprobs from one forward over the whole sequence, no cache, no padding."""
    sequence = torch.tensor([context + ids])
    with torch.no_grad():
        logits = model(input_ids=sequence).logits[0, len(context) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)


def _sharp_policy(tokenizer):
    """The tiny policy with its weights scaled up: at init its attention is so flat that positions barely count."""
    model = tiny_qwen2(tokenizer).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" not in name:
                parameter.mul_(3.0)
    return model


def test_a_turn_continued_from_the_cache_has_the_logprobs_of_a_full_forward():
    tokenizer = train_tokenizer()
    model = _sharp_policy(tokenizer)
    sampler = HFTurnSampler(model, tokenizer.pad_token_id, stop_ids=[])
    torch.manual_seed(0)
    first = [_context(1, 40), _context(2, 25)]
    turns = sampler.generate_batch(first, [6, 9])
    prefilled = sampler.prefilled_tokens

    # each episode's next context: its last one, its turn, the env's reply; and a new episode beside them
    second = [first[0] + turns[0].ids + _context(3, 5), first[1] + turns[1].ids + _context(4, 11), _context(5, 30)]
    again = sampler.generate_batch(second, [7, 5, 8])

    # the longer turn's last token was sampled but never run, so it is prefilled with the reply
    assert sampler.reused_tokens == (40 + 6) + (25 + 8)
    assert sampler.prefilled_tokens - prefilled == 5 + (1 + 11) + 30
    for context, turn in zip(second, again):
        expected = _full_forward_logprobs(model, context, turn.ids)
        torch.testing.assert_close(torch.tensor(turn.logprobs), expected, atol=1e-4, rtol=0)


def test_new_weights_empty_the_cache():
    tokenizer = train_tokenizer()
    model = tiny_qwen2(tokenizer).eval()
    sampler = HFTurnSampler(model, tokenizer.pad_token_id, stop_ids=[])
    context = _context(1, 40)
    turn = sampler.generate_batch([context], [4])[0]
    sampler.version = 1
    sampler.generate_batch([context + turn.ids + [7, 8]], [4])
    assert sampler.reused_tokens == 0


def _layers(length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.zeros(1, 1, length, 2), torch.zeros(1, 1, length, 2))]


def test_the_cache_keeps_the_longest_turn_of_an_episode_and_the_latest_episodes():
    cache = TurnCache(capacity=2)
    prompt = tuple(range(MIN_REUSED_TOKENS + 4))
    cache.store(prompt, _layers(len(prompt)), version=0)
    cache.store(prompt + (1, 2), _layers(len(prompt) + 2), version=0)  # the same episode, a turn on
    assert len(cache) == 1  # the longer turn covers the shorter

    entry, reused = cache.longest_prefix(list(prompt + (1, 2, 3)), version=0)
    assert entry is not None and reused == len(prompt) + 2
    _, reused = cache.longest_prefix(list(prompt + (1, 2)), version=0)
    assert reused == len(prompt) + 1  # the context's last token runs, to give the next token's logits
    assert cache.longest_prefix(list(range(MIN_REUSED_TOKENS - 1)) + [999], version=0) == (None, 0)

    cache.store((500,) * 20, _layers(20), version=0)
    cache.store((600,) * 20, _layers(20), version=0)
    assert len(cache) == 2  # the least recently used entry went
    assert cache.longest_prefix(list(prompt) + [1], version=0) == (None, 0)
