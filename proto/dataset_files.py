"""The dataset files regrow exports, the contract between its exporters and Hugging Face `datasets`.

One table of rows, written as one of:
  jsonl    one JSON object a line        load_dataset("json", data_files=OUT, split="train")
  parquet  one Parquet file              load_dataset("parquet", data_files=OUT, split="train")
  hf       a Dataset.save_to_disk folder datasets.load_from_disk(OUT)
An existing OUT is never replaced unless asked (`force`), and a failed write leaves OUT as it was.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Iterable
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# `datasets` reads the JSON Lines export's mixed-type fields (tool arguments) as Json only from this version on.
DATASETS_REQUIREMENT = "datasets>=5.2"
# Rows per Parquet row group: one trace row can hold a hundred steps of 64 KiB output, so batches stay small.
BATCH_ROWS = 32


class DatasetFormat(str, Enum):
    jsonl = "jsonl"
    parquet = "parquet"
    hf = "hf"


def check_output(out: Path, force: bool) -> None:
    """Refuse to write over an existing path unless `force`; call it before any long work."""
    if out.exists() and not force:
        raise FileExistsError(f"{out} already exists: choose another --out, or pass --force to replace it")


def write_dataset(rows: Iterable[dict[str, Any]], schema: pa.Schema, out: Path, fmt: DatasetFormat, force: bool) -> int:
    """Write `rows` to `out` in `fmt`, a batch at a time (a large trace database never sits in memory whole);
    returns the number of rows.

    The Arrow formats keep the columns of `schema`; the JSON Lines keep every key of a row, so a row may carry
    more (a trace's own fields, for readers of EpisodeTrace) than the table has.
    """
    check_output(out, force)
    partial = out.with_name(f".{out.name}.partial")
    _remove(partial)
    try:
        if fmt is DatasetFormat.jsonl:
            count = 0
            with partial.open("w", encoding="utf-8") as sink:
                for row in rows:
                    sink.write(json.dumps(row, default=_json_value, ensure_ascii=False) + "\n")
                    count += 1
        elif fmt is DatasetFormat.parquet:
            count = _write_parquet(rows, schema, partial)
        else:
            count = _write_hf(rows, schema, partial)
        _replace(partial, out)
    finally:
        _remove(partial)
    return count


def _write_parquet(rows: Iterable[dict[str, Any]], schema: pa.Schema, out: Path) -> int:
    count = 0
    with pq.ParquetWriter(out, schema) as writer:
        remaining = iter(rows)
        while batch := list(itertools.islice(remaining, BATCH_ROWS)):  # itertools.batched is 3.12+
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
        if count == 0:
            writer.write_table(schema.empty_table())
    return count


def _write_hf(rows: Iterable[dict[str, Any]], schema: pa.Schema, out: Path) -> int:
    """A save_to_disk folder, built from a Parquet file beside it that `datasets` memory-maps, not from a table."""
    dataset_class = _dataset_class()
    staging = out.with_name(f"{out.name}.staging")
    _remove(staging)
    staging.mkdir()
    try:
        count = _write_parquet(rows, schema, staging / "rows.parquet")
        if count:
            dataset = dataset_class.from_parquet(str(staging / "rows.parquet"), cache_dir=str(staging / "cache"))
        else:  # `datasets` cannot build from a file with no rows
            dataset = dataset_class(schema.empty_table())
        dataset.save_to_disk(str(out))
    finally:
        _remove(staging)
    return count


def _dataset_class() -> Any:
    try:
        from datasets import Dataset
    except ImportError as error:
        raise ImportError(
            f"--format hf needs Hugging Face datasets: pip install '{DATASETS_REQUIREMENT}' "
            "(or use --format parquet, which datasets loads too)"
        ) from error
    return Dataset


def _json_value(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _replace(new: Path, out: Path) -> None:
    """Move `new` to `out`; an old `out` (a folder cannot be replaced in one rename) goes only once `new` is there."""
    old = out.with_name(f".{out.name}.old")
    _remove(old)
    if out.exists() or out.is_symlink():
        os.replace(out, old)
    os.replace(new, out)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
