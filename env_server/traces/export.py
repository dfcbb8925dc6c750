"""`regrow traces export`: the recorded episodes of a trace database as a Hugging Face `datasets` dataset.

Every format has the columns of `traces.datasets.EPISODE_SCHEMA`. A JSON Lines row is also a whole
`proto.traces.EpisodeTrace` (it adds `tools` and `steps`), the file `regrow replay` reads. The token columns come
from the trainer's `episode_tokens.jsonl` files (`proto.traces.EpisodeTokens` lines), joined by episode id.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from env_server.traces.datasets import EPISODE_SCHEMA, episode_row
from env_server.traces.store import TraceStore
from proto.dataset_files import DatasetFormat, check_output, write_dataset
from proto.traces import EpisodeTokens, EpisodeTrace
from proto.transcript import prefix_history

log = logging.getLogger(__name__)


class TraceExportError(Exception):
    """The export cannot start: the database or a tokens file is missing or unreadable, or there are no episodes."""


@dataclass(frozen=True)
class ExportSummary:
    """The episodes written, and how the trainer's token records matched them."""

    episodes: int
    with_tokens: int  # episodes written with the trainer's tokens
    unmatched_tokens: int  # token records of episodes not in the database (another server's, or never stored)


def export_traces(
    db: Path, out: Path, fmt: DatasetFormat, force: bool = False, tokens: Sequence[Path] = ()
) -> ExportSummary:
    """Write every episode in the trace database `db` to `out`, with the token records of the files `tokens`.

    Episodes are read and written one batch at a time: the export's memory does not grow with the database.
    """
    check_output(out, force)
    by_episode = read_episode_tokens(tokens)
    stored: set[str] = set()
    with open_traces(db) as store:

        def rows() -> Iterator[dict[str, Any]]:
            for trace in store.iter_episodes():
                stored.add(trace.episode_id)
                yield _row(trace, by_episode.get(trace.episode_id), fmt, _prefix(store, trace))

        if not store.read("SELECT 1 FROM episodes LIMIT 1"):
            raise TraceExportError(f"{db} holds no episodes yet: play some against `regrow serve` first")
        count = ExportSummary(
            write_dataset(rows(), EPISODE_SCHEMA, out, fmt, force),
            with_tokens=len(stored & by_episode.keys()),
            unmatched_tokens=len(by_episode.keys() - stored),
        )
    log.info("exported %d episodes from %s to %s (%s)", count.episodes, db, out, fmt.value)
    if count.unmatched_tokens:
        log.warning("%d token records matched no episode in %s", count.unmatched_tokens, db)
    return count


def read_episode_tokens(paths: Sequence[Path]) -> dict[str, EpisodeTokens]:
    """The token records of the files `paths` by episode id; a later record of an episode replaces an earlier one."""
    by_episode: dict[str, EpisodeTokens] = {}
    for path in paths:
        if not path.is_file():
            raise TraceExportError(
                f"no tokens file at {path}: pass the episode_tokens.jsonl in a `regrow train` output dir"
            )
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = EpisodeTokens.model_validate_json(line)
                except ValidationError as error:
                    raise TraceExportError(
                        f"{path} line {number} is not an EpisodeTokens record ({error.errors()[0]['msg']}): "
                        "fix or delete that line (a run killed mid-write can cut its last one)"
                    ) from error
                by_episode[record.episode_id] = record
    return by_episode


@contextmanager
def open_traces(db: Path) -> Iterator[TraceStore]:
    """The trace database at `db`, closed on exit; never creates a database that is not there."""
    if not db.is_file():
        raise TraceExportError(f"no trace database at {db}: pass the server's file (REGROW_SERVER_TRACE_DB)")
    try:
        store = TraceStore(db)
    except sqlite3.DatabaseError as error:
        raise TraceExportError(f"{db} is not a readable trace database ({error}): pass the server's file") from error
    try:
        yield store
    finally:
        store.close()


def _prefix(store: TraceStore, trace: EpisodeTrace) -> list[dict[str, Any]] | None:
    """The steps a prefix reset's episode started after, as its agent was shown them; None for any other episode."""
    origin = store.get_episode(trace.prefix_of) if trace.prefix_of else None
    if origin is None:
        return None
    return prefix_history(origin, trace.prefix_steps)


def _row(
    trace: EpisodeTrace, tokens: EpisodeTokens | None, fmt: DatasetFormat, prefix: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    row = episode_row(trace, tokens, prefix)
    if fmt is DatasetFormat.jsonl:
        return {**row, **trace.model_dump(mode="json", include={"tools", "steps"})}
    return row
