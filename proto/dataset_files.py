"""The dataset files regrow exports, the contract between its exporters and Hugging Face `datasets`.

One table of rows, written as one of:
  jsonl    one JSON object a line        load_dataset("json", data_files=OUT, split="train")
  parquet  one Parquet file              load_dataset("parquet", data_files=OUT, split="train")
  hf       a Dataset.save_to_disk folder datasets.load_from_disk(OUT)
An existing OUT is never replaced unless asked (`force`), and a failed write leaves OUT as it was.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# `datasets` reads the JSON Lines export's mixed-type fields (tool arguments) as Json only from this version on.
DATASETS_REQUIREMENT = "datasets>=5.2"


class DatasetFormat(str, Enum):
    jsonl = "jsonl"
    parquet = "parquet"
    hf = "hf"


def check_output(out: Path, force: bool) -> None:
    """Refuse to write over an existing path unless `force`; call it before any long work."""
    if out.exists() and not force:
        raise FileExistsError(f"{out} already exists: choose another --out, or pass --force to replace it")


def write_dataset(rows: list[dict[str, Any]], schema: pa.Schema, out: Path, fmt: DatasetFormat, force: bool) -> int:
    """Write `rows` to `out` in `fmt`; returns the number of rows.

    The Arrow formats keep the columns of `schema`; the JSON Lines keep every key of a row, so a row may carry
    more (a trace's own fields, for readers of EpisodeTrace) than the table has.
    """
    check_output(out, force)
    partial = out.with_name(f".{out.name}.partial")
    _remove(partial)
    try:
        if fmt is DatasetFormat.jsonl:
            with partial.open("w", encoding="utf-8") as sink:
                for row in rows:
                    sink.write(json.dumps(row, default=_json_value, ensure_ascii=False) + "\n")
        else:
            table = pa.Table.from_pylist(rows, schema=schema)
            if fmt is DatasetFormat.parquet:
                pq.write_table(table, partial)
            else:
                _dataset_class()(table).save_to_disk(str(partial))
        _replace(partial, out)
    finally:
        _remove(partial)
    return len(rows)


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
