"""Recorded episodes as dataset rows: the chat transcript, the tool trace, the reward and its details.

Field names follow OpenEnv's episode collection (`openenv.core.harness.collect.EpisodeRecord`) where it
defines them: `episode_id`, `messages`, `reward`, `done`, `tool_trace` with `tool_name`, `arguments` and a
`result` of `data`, `done`, `metadata`, `error`. Values of no fixed shape (tool arguments, metadata, tool
specs) are JSON strings, so that every row has one Arrow type and Parquet holds it. A tool call's
`arguments` is therefore JSON text, as in OpenAI's chat format; a chat template that applies `tojson` to
them (Llama 3.1's, Qwen2.5's) wants them `json.loads`-ed first, and `tools_json` too before `tools=`.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from proto.observations import CodingObservation
from proto.traces import EpisodeTokens, EpisodeTrace, StepTrace

# The trainer marks each call with the index of the model turn that made it (trainer_client's chat_format.TURN_KEY).
TURN_KEY = "turn"
SYSTEM_TEXT = (
    "You are a software engineer. The repository is in /workspace. Fix the task by calling the tools; "
    "call submit when you are done."
)

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_TOOL_CALL = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
    ]
)
MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("tool_calls", pa.list_(_TOOL_CALL)),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
    ]
)
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


def episode_row(trace: EpisodeTrace, tokens: EpisodeTokens | None = None) -> dict[str, Any]:
    """One dataset row of `EPISODE_SCHEMA` for a recorded episode, with the trainer's `tokens` of it if given."""
    steps = sorted(trace.steps, key=lambda step: step.index)
    return {
        "episode_id": trace.episode_id,
        "task_id": trace.task_id,
        "status": trace.status,
        "done": trace.status != "running",
        "reward": trace.reward,
        "reward_details": trace.reward_details.model_dump(mode="json") if trace.reward_details else None,
        "problem_statement": trace.problem_statement,
        "messages": chat_messages(trace.problem_statement, steps),
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


def chat_messages(problem_statement: str, steps: list[StepTrace]) -> list[dict[str, Any]]:
    """The episode in OpenAI/HF chat form: system, user (the task), then per model turn one assistant message
    with its tool calls and one tool message per call. Calls the trainer marked with one turn share a message."""
    messages = [_message("system", SYSTEM_TEXT), _message("user", problem_statement)]
    for turn in _turns(steps):
        calls = [
            {
                "id": _call_id(step),
                "type": "function",
                "function": {"name": step.action.tool, "arguments": json.dumps(step.action.args)},
            }
            for step in turn
        ]
        messages.append(_message("assistant", "", tool_calls=calls))
        messages += [
            _message("tool", tool_text(step.observation), tool_call_id=_call_id(step), name=step.action.tool)
            for step in turn
        ]
    return messages


def tool_text(observation: CodingObservation) -> str:
    """A tool message's content: the output, then the exit code, truncation and feedback the agent was sent."""
    parts = [observation.output.rstrip("\n")] if observation.output else []
    if observation.exit_code is not None:
        parts.append(f"[exit code: {observation.exit_code}]")
    if observation.truncated:
        parts.append("[output truncated]")
    if observation.feedback:
        parts.append(f"[feedback: {observation.feedback}]")
    return "\n".join(parts) if parts else "[no output]"


def _turns(steps: list[StepTrace]) -> list[list[StepTrace]]:
    turns: list[list[StepTrace]] = []
    for step in steps:
        turn = step.action.metadata.get(TURN_KEY)
        if turns and turn is not None and turns[-1][0].action.metadata.get(TURN_KEY) == turn:
            turns[-1].append(step)
        else:
            turns.append([step])
    return turns


def _call_id(step: StepTrace) -> str:
    return f"call_{step.index}"


def _message(
    role: str,
    content: str,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    return {"role": role, "content": content, "tool_calls": tool_calls, "tool_call_id": tool_call_id, "name": name}


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
