"""`regrow bench rollouts --prefix-latency`: its probe waits for a free episode slot instead of failing the bench."""

import asyncio

import pytest

from regrow.bench.rollouts import when_a_slot_frees
from trainer_client.env.errors import EnvAtCapacity


def _refused_then(refusals: int):
    tries = []

    async def attempt() -> float:
        tries.append(1)
        if len(tries) <= refusals:
            raise EnvAtCapacity("env server at http://x is at capacity (4 of 4 sessions)")
        return 0.5

    return attempt, tries


def test_a_probe_refused_while_the_stream_frees_its_slots_tries_again():
    attempt, tries = _refused_then(2)

    assert asyncio.run(when_a_slot_frees(attempt, wait_s=5.0)) == 0.5
    assert len(tries) == 3


def test_a_server_that_stays_full_fails_the_probe_after_the_wait():
    attempt, tries = _refused_then(10_000)

    with pytest.raises(EnvAtCapacity):
        asyncio.run(when_a_slot_frees(attempt, wait_s=0.5))
    assert 2 <= len(tries) <= 3  # 0.25 s, then 0.5 s would pass the deadline
