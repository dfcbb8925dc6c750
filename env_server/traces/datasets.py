"""Recorded episodes as dataset rows: the transcript the policy saw, the tool trace, the reward and its details.

`messages` is `proto.transcript`, the very text the trainer renders for the policy (system prompt, task, each
turn's assistant text and one user message of tool responses); the env's feedback is never in it, but sits beside
each tool-response message in `feedback`. Other field names follow OpenEnv's episode collection
(`openenv.core.harness.collect.EpisodeRecord`) where it defines them: `episode_id`, `reward`, `done`, `tool_trace`
with `tool_name`, `arguments` and a `result` of `data`, `done`, `metadata`, `error`. Values of no fixed shape (tool
arguments, metadata, tool specs) are JSON strings, so that every row has one Arrow type and Parquet holds it.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from proto.traces import EpisodeTokens, EpisodeTrace, StepTrace
from proto.transcript import (
    assistant_text,
    initial_messages,
    prefix_messages,
    tool_response_message,
    turn_feedback,
    turns,
)

_TIMESTAMP = pa.timestamp("us", tz="UTC")
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()), ("feedback", pa.string())])
TOOL_TRACE_ENTRY = pa.struct(
    [
        ("index", pa.int32()),
        ("tool_name", pa.string()),
        ("arguments", pa.string()),
        (
            "result",
            pa.struct(
                [
                    ("data", pa.string()),
                    ("done", pa.bool_()),
                    ("metadata", pa.string()),
                    ("error", pa.string()),
                    ("exit_code", pa.int32()),
                    ("truncated", pa.bool_()),
                    ("feedback", pa.string()),
                ]
            ),
        ),
        ("started_at", _TIMESTAMP),
        ("duration_s", pa.float64()),
    ]
)
# proto.observations.RewardDetails, field for field (a test holds the two together).
REWARD_DETAILS = pa.struct(
    [
        ("reward", pa.float64()),
        ("mode", pa.string()),
        ("f2p_passed", pa.int32()),
        ("f2p_total", pa.int32()),
        ("p2p_passed", pa.int32()),
        ("p2p_total", pa.int32()),
        (
            "tests",
            pa.list_(pa.struct([("nodeid", pa.string()), ("outcome", pa.string()), ("group", pa.string())])),
        ),
        ("ignored_paths", pa.list_(pa.string())),
        ("refused", pa.list_(pa.struct([("path", pa.string()), ("reason", pa.string())]))),
        ("hidden_passed", pa.int32()),
        ("hidden_total", pa.int32()),
        ("basis", pa.string()),
        ("units_credited", pa.int32()),
        ("units_total", pa.int32()),
        (
            "units",
            pa.list_(
                pa.struct(
                    [
                        ("unit", pa.string()),
                        ("credited", pa.bool_()),
                        ("secret_passed", pa.int32()),
                        ("secret_total", pa.int32()),
                        ("consistency_failed", pa.int32()),
                        ("evidence", pa.bool_()),
                    ]
                )
            ),
        ),
        ("timeout_s", pa.float64()),
        ("tampered", pa.bool_()),
        ("tamper_reasons", pa.list_(pa.string())),
        ("tamper_flags", pa.list_(pa.string())),
        ("diff", pa.string()),
        ("error", pa.string()),
    ]
)
EPISODE_SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("task_id", pa.string()),
        ("status", pa.string()),
        ("done", pa.bool_()),
        ("reward", pa.float64()),
        ("reward_details", REWARD_DETAILS),
        ("problem_statement", pa.string()),
        ("messages", pa.list_(MESSAGE)),
        # A prefix reset's origin and how many of its steps came first (in `messages`, never the policy's own turns).
        ("prefix_of", pa.string()),
        ("prefix_steps", pa.int32()),
        # Why it was played (training, evaluation, demonstration, prefix) and the training run that played it.
        ("origin", pa.string()),
        ("run_id", pa.string()),
        ("tools_json", pa.string()),
        ("tool_trace", pa.list_(TOOL_TRACE_ENTRY)),
        ("num_steps", pa.int32()),
        ("duration_s", pa.float64()),
        ("started_at", _TIMESTAMP),
        ("ended_at", _TIMESTAMP),
        # The policy's tokens, from the trainer's episode_tokens.jsonl; null when it recorded none for the episode
        # (the env server never sees tokens). logprobs and env_mask have one entry per completion id.
        ("prompt_ids", pa.list_(pa.int32())),
        ("completion_ids", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float32())),
        ("env_mask", pa.list_(pa.int8())),  # 1 the policy wrote the token, 0 the env inserted it
    ]
)


def episode_row(
    trace: EpisodeTrace, tokens: EpisodeTokens | None = None, prefix: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One dataset row of `EPISODE_SCHEMA` for a recorded episode, with the trainer's `tokens` of it if given; a
    prefix reset's episode gets its `prefix` (proto.transcript.prefix_history of its origin) in its messages."""
    steps = sorted(trace.steps, key=lambda step: step.index)
    return {
        "episode_id": trace.episode_id,
        "task_id": trace.task_id,
        "status": trace.status,
        "done": trace.status != "running",
        "reward": trace.reward,
        "reward_details": trace.reward_details.model_dump(mode="json") if trace.reward_details else None,
        "problem_statement": trace.problem_statement,
        "messages": chat_messages(trace, prefix),
        "prefix_of": trace.prefix_of,
        "prefix_steps": trace.prefix_steps,
        "origin": trace.origin,
        "run_id": trace.run_id,
        "tools_json": json.dumps([{"type": "function", "function": spec} for spec in trace.tools]),
        "tool_trace": [_tool_trace_entry(step) for step in steps],
        "num_steps": len(steps),
        "duration_s": (trace.ended_at - trace.started_at).total_seconds() if trace.ended_at else None,
        "started_at": trace.started_at,
        "ended_at": trace.ended_at,
        "prompt_ids": tokens.prompt_ids if tokens else None,
        "completion_ids": tokens.completion_ids if tokens else None,
        "logprobs": tokens.logprobs if tokens else None,
        "env_mask": tokens.env_mask if tokens else None,
    }


def chat_messages(trace: EpisodeTrace, prefix: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The policy's transcript of the episode; each tool-response message carries the feedback on its turn. A prefix
    reset's prefix comes first, as the trainer showed it (proto.transcript.prefix_messages)."""
    opening = initial_messages(trace.problem_statement, trace.tools) + prefix_messages({"history": prefix or []})
    messages = [{**message, "feedback": None} for message in opening]
    for turn in turns(trace.steps):
        observations = [step.observation for step in turn]
        messages.append({"role": "assistant", "content": assistant_text(turn), "feedback": None})
        messages.append({**tool_response_message(observations), "feedback": turn_feedback(observations)})
    return messages


def _tool_trace_entry(step: StepTrace) -> dict[str, Any]:
    observation = step.observation
    return {
        "index": step.index,
        "tool_name": step.action.tool,
        "arguments": json.dumps(step.action.args),
        "result": {
            "data": observation.output,
            "done": observation.done,
            "metadata": json.dumps(observation.metadata),
            "error": observation.metadata.get("tool_error"),
            "exit_code": observation.exit_code,
            "truncated": observation.truncated,
            "feedback": observation.feedback,
        },
        "started_at": step.started_at,
        "duration_s": step.duration_s,
    }
