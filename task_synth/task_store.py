"""Writing the task store: tasks.jsonl, the hidden grader files, and a Hugging Face datasets Parquet export."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from proto.tasks import IoCheck, TaskRecord

IO_CHECKS_FILE = "io_checks.json"


def read_records(store: Path) -> list[TaskRecord]:
    path = store / "tasks.jsonl"
    if not path.exists():
        return []
    return [TaskRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def write_store(store: Path, records: list[TaskRecord], checkout_root: Path, io_checks: Mapping[str, list[IoCheck]]) -> None:
    """Add `records` (replacing same ids) with their hidden files; tasks.jsonl is replaced atomically.

    `io_checks` maps an instance id to its recorded checks; a task without any gets an empty io_checks.json.
    """
    store.mkdir(parents=True, exist_ok=True)
    for record in records:
        hidden = store / "hidden" / record.instance_id
        shutil.rmtree(hidden, ignore_errors=True)
        (hidden / "tests").mkdir(parents=True)
        (hidden / "solution.patch").write_text(record.solution_patch)
        checks = [check.model_dump() for check in io_checks.get(record.instance_id, [])]
        (hidden / IO_CHECKS_FILE).write_text(json.dumps(checks, indent=1) + "\n")
        for test_file in record.test_files:
            target = hidden / "tests" / test_file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(checkout_root / test_file, target)
    new_ids = {record.instance_id for record in records}
    merged = [r for r in read_records(store) if r.instance_id not in new_ids] + records
    partial = store / "tasks.jsonl.partial"
    partial.write_text("".join(record.model_dump_json() + "\n" for record in merged))
    os.replace(partial, store / "tasks.jsonl")
    export_parquet(store, store / "tasks.parquet")


def export_parquet(store: Path, destination: Path) -> Path:
    """tasks.jsonl as one Parquet file that `datasets.load_dataset("parquet", data_files=...)` reads."""
    rows = [record.model_dump(mode="json") for record in read_records(store)]
    table = pa.Table.from_pylist(rows) if rows else pa.table({"instance_id": pa.array([], pa.string())})
    partial = destination.with_name(destination.name + ".partial")
    pq.write_table(table, partial)
    os.replace(partial, destination)
    return destination
