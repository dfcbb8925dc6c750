"""Exports recorded episodes: JSONL of `proto.traces.EpisodeTrace`, or Parquet with one row per episode."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from env_server.trace_store import TraceStore

_STEP = pa.struct(
    [
        ("index", pa.int32()),
        ("tool", pa.string()),
        ("args_json", pa.string()),
        ("observation_json", pa.string()),
        ("feedback", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("duration_s", pa.float64()),
    ]
)
PARQUET_SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("task_id", pa.string()),
        ("status", pa.string()),
        ("reward", pa.float64()),
        ("reward_details_json", pa.string()),
        ("problem_statement", pa.string()),
        ("tools_json", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("ended_at", pa.timestamp("us", tz="UTC")),
        ("steps", pa.list_(_STEP)),
    ]
)


def export_jsonl(store: TraceStore, out: Path) -> int:
    """Write one EpisodeTrace JSON object per line; returns the number of episodes."""
    count = 0
    with Path(out).open("w", encoding="utf-8") as sink:
        for trace in store.iter_episodes():
            sink.write(trace.model_dump_json() + "\n")
            count += 1
    return count


def export_parquet(store: TraceStore, out: Path) -> int:
    """Write one row per episode, its steps as a nested list; returns the number of episodes."""
    rows = []
    for trace in store.iter_episodes():
        rows.append(
            {
                "episode_id": trace.episode_id,
                "task_id": trace.task_id,
                "status": trace.status,
                "reward": trace.reward,
                "reward_details_json": trace.reward_details.model_dump_json() if trace.reward_details else None,
                "problem_statement": trace.problem_statement,
                "tools_json": json.dumps(trace.tools),
                "started_at": trace.started_at,
                "ended_at": trace.ended_at,
                "steps": [
                    {
                        "index": s.index,
                        "tool": s.action.tool,
                        "args_json": json.dumps(s.action.args),
                        "observation_json": s.observation.model_dump_json(),
                        "feedback": s.observation.feedback,
                        "started_at": s.started_at,
                        "duration_s": s.duration_s,
                    }
                    for s in trace.steps
                ],
            }
        )
    pq.write_table(pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA), out)
    return len(rows)
