"""`regrow traces export`: the recorded episodes of a trace database as a Hugging Face `datasets` dataset.

Every format has the columns of `trace_datasets.EPISODE_SCHEMA`. A JSON Lines row is also a whole
`proto.traces.EpisodeTrace` (it adds `tools` and `steps`), the file `regrow replay` reads.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

from env_server.trace_datasets import EPISODE_SCHEMA, episode_row
from env_server.trace_store import TraceStore
from proto.dataset_files import DatasetFormat, check_output, write_dataset
from proto.traces import EpisodeTrace

log = logging.getLogger(__name__)


class TraceExportError(Exception):
    """The export cannot start: the database is missing, unreadable or holds no episodes."""


def export_traces(db: Path, out: Path, fmt: DatasetFormat, force: bool = False) -> int:
    """Write every episode in the trace database `db` to `out`; returns the number of episodes."""
    check_output(out, force)
    traces = read_traces(db)
    if not traces:
        raise TraceExportError(f"{db} holds no episodes yet: play some against `regrow serve` first")
    rows = [_row(trace, fmt) for trace in traces]
    count = write_dataset(rows, EPISODE_SCHEMA, out, fmt, force)
    log.info("exported %d episodes from %s to %s (%s)", count, db, out, fmt.value)
    return count


def read_traces(db: Path) -> list[EpisodeTrace]:
    """Every episode in `db`, oldest first; never creates a database that is not there."""
    if not db.is_file():
        raise TraceExportError(f"no trace database at {db}: pass the server's file (REGROW_SERVER_TRACE_DB)")
    try:
        store = TraceStore(db)
    except sqlite3.DatabaseError as error:
        raise TraceExportError(f"{db} is not a readable trace database ({error}): pass the server's file") from error
    try:
        return list(store.iter_episodes())
    finally:
        store.close()


def _row(trace: EpisodeTrace, fmt: DatasetFormat) -> dict[str, Any]:
    row = episode_row(trace)
    if fmt is DatasetFormat.jsonl:
        return {**row, **trace.model_dump(mode="json", include={"tools", "steps"})}
    return row
