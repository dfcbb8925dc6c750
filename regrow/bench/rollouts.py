"""`regrow bench rollouts`: episodes per minute that rollout workers sustain against a live env server, the share of
groups whose rewards are all equal under the env's task draw, and a prefix reset's latency against a plain one's."""

import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from proto import is_pass
from regrow.bench.options import RolloutBenchOptions
from regrow.bench.training import bench_model
from trainer_client.rollout.chat_tokens import EpisodeTokenizer

CAPACITY_WAIT_S = 120.0  # how long the latency probe waits for a free episode slot


def run_rollout_bench(options: RolloutBenchOptions, sampler_name: str = "uniform") -> dict:
    """Episodes per minute that `workers` rollout workers sustain against a live env server, and the share of groups
    whose rewards are all equal (no GRPO signal) under the env's `sampler_name` draw.

    With `--skill-policy` the policy is skill_policy.py's stand-in of known skill on that store's tasks."""
    import itertools

    from trainer_client.rollout.stream import RolloutStream
    from trainer_client.rollout.stream_settings import StreamSettings

    env_url, workers, group_size = options.env, options.workers, options.group_size
    model, tokenizer = bench_model(options.model)
    tokens = EpisodeTokenizer(tokenizer)
    policy, limits = _policy_and_limits(options, model, tokenizer, tokens)
    drawn = {"sampler": sampler_name} if sampler_name != "uniform" else {}
    resets: Iterator[dict[str, Any]] = (
        ({"task_id": t} for t in itertools.cycle(options.task_id))
        if options.task_id
        else ({"seed": options.seed * 1_000_003 + n, **drawn} for n in itertools.count())
    )
    buffered = max(2, workers * 2 // group_size)
    # tagged an evaluation: a benchmark's episodes say nothing of a training run's frontier
    tags: dict[str, Any] = {"origin": "evaluation"}
    if options.prefix_latency:  # a prefix may pass a command only where the episode recorded its effect
        tags["track_effects"] = True
    playing = StreamSettings(workers, group_size, max_staleness=10**9, max_buffered_groups=buffered, reset_tags=tags)
    stream = RolloutStream(env_url, policy, tokens, limits, resets, playing)
    started = time.perf_counter()
    with stream:
        groups = stream.next_groups(max(1, options.episodes // group_size), policy_version=0)
    elapsed = time.perf_counter() - started
    played = [t for group in groups for t in group]
    flat = [group for group in groups if len({t.reward for t in group}) == 1]
    latency = prefix_reset_latency(env_url, played) if options.prefix_latency else None
    return {
        "env": env_url,
        "model": "skill policy" if options.skill_policy is not None else options.model,
        "sampler": sampler_name,
        "workers": workers,
        "episodes": len(played),
        "groups": len(groups),
        "group_size": group_size,
        "zero_variance_share": round(len(flat) / len(groups), 3) if groups and group_size > 1 else None,
        "pass_rate": round(statistics.mean(is_pass(t.reward) for t in played), 3),
        # which tasks a policy sometimes passes: the ones whose groups differ, the only ones GRPO learns from
        "pass_rate_by_task": pass_rate_by_task(played),
        "tasks_played": len({t.task_id for t in played}),
        "turns_per_episode": round(statistics.mean(len(t.turns) for t in played), 2),
        "env_steps": sum(turn.calls for t in played for turn in t.turns),
        "seconds": round(elapsed, 2),
        "episodes_per_minute": round(60 * len(played) / elapsed, 2),
        "episode_retries": stream.stats.episode_retries,
        "reset_latency": latency,
        # context tokens run at the start of a turn, and those the sampler's turn cache spared it
        "prefilled_tokens": getattr(policy, "prefilled_tokens", None),
        "reused_tokens": getattr(policy, "reused_tokens", None),
    }


def _policy_and_limits(options: RolloutBenchOptions, model, tokenizer, tokens: EpisodeTokenizer) -> tuple:
    """The transformers sampler, or with `--skill-policy` the stand-in of known skill, and its episode limits."""
    from trainer_client.rollout.agent_loop import EpisodeLimits
    from trainer_client.rollout.hf_sampler import HFTurnSampler

    if options.skill_policy is not None:
        from regrow.bench.skill_policy import SkillSampler

        policy = SkillSampler(tokenizer, tokens.end_of_turn_id, options.skill_policy, options.seed)
        return policy, EpisodeLimits(max_turns=options.max_turns, max_turn_tokens=16384, max_completion_tokens=32768)
    sampler = HFTurnSampler(
        model,
        tokenizer.pad_token_id,
        tokens.stop_ids,
        options.temperature,
        max_batch=options.workers,
        cached_turns=None if options.turn_cache else 0,
    )
    return sampler, EpisodeLimits(options.max_turns, options.max_turn_tokens, max_completion_tokens=2048)


def pass_rate_by_task(played: list) -> dict[str, float]:
    outcomes: dict[str, list[bool]] = {}
    for trajectory in played:
        outcomes.setdefault(trajectory.task_id or "?", []).append(is_pass(trajectory.reward))
    return {task: round(statistics.mean(passed), 3) for task, passed in sorted(outcomes.items())}


async def when_a_slot_frees(attempt: Callable[[], Awaitable[float]], wait_s: float) -> float:
    """`attempt()`, tried again (0.25 s doubling to 4 s apart) while the env answers that it is at capacity, for up
    to `wait_s`; then its EnvAtCapacity goes to the caller."""
    import asyncio

    from trainer_client.env.errors import EnvAtCapacity

    deadline, pause = time.monotonic() + wait_s, 0.25
    while True:
        try:
            return await attempt()
        except EnvAtCapacity:
            if time.monotonic() + pause > deadline:
                raise
            await asyncio.sleep(pause)
            pause = min(2 * pause, 4.0)


def prefix_reset_latency(env_url: str, played: list[Any], repetitions: int = 10) -> dict | None:
    """Seconds to the first observation of a plain reset and of a prefix reset of the same task (p50 of
    `repetitions`), the prefix being the first step of a played episode that took two or more; None when none did."""
    import asyncio

    from trainer_client.env.client import EnvClient

    source = next((t for t in played if sum(turn.calls for turn in t.turns) >= 2 and t.episode_id), None)
    if source is None:
        return None

    async def once(options: dict[str, Any]) -> float:
        client = EnvClient(env_url, max_connections=1)
        try:
            started = time.perf_counter()
            async with client.episode(**options):
                elapsed = time.perf_counter() - started
            return elapsed
        finally:
            await client.aclose()

    async def timed(options: dict[str, Any]) -> float:
        # right after the stream, the server may not have freed its sessions' slots yet
        return await when_a_slot_frees(lambda: once(options), CAPACITY_WAIT_S)

    async def measure() -> dict:
        plain = [await timed({"task_id": source.task_id}) for _ in range(repetitions)]
        prefixed = [await timed({"prefix_of": source.episode_id, "prefix_steps": 1}) for _ in range(repetitions)]
        return {
            "prefix_of": source.episode_id,
            "prefix_steps": 1,
            "plain_reset_p50_s": round(statistics.median(plain), 3),
            "prefix_reset_p50_s": round(statistics.median(prefixed), 3),
        }

    return asyncio.run(measure())
