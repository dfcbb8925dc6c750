"""Writing the task store (its layout is proto.task_files): records, each task's workspace archive and hidden
grader files, the repository's install archive and wheels, and a Hugging Face datasets Parquet export."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from proto.task_files import (
    INSTALL_ARCHIVE,
    IO_CHECKS,
    PARQUET,
    PRISTINE_TESTS,
    RECORDS,
    SOLUTION_PATCH,
    WHEELS,
    hidden_dir,
    read_records,
    workspace_archive,
)
from proto.tasks import IoCheck, TaskRecord
from task_synth.errors import SynthError
from task_synth.splits import mixed_snapshots


@dataclass(frozen=True)
class RepoFiles:
    """What every task of one repository snapshot shares: its folder in the store, install archive and wheelhouse."""

    folder: str
    install_archive: bytes
    wheelhouse: Path | None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def write_repo_files(store: Path, repo: RepoFiles) -> None:
    folder = store / repo.folder
    _write_atomic(folder / INSTALL_ARCHIVE, repo.install_archive)
    if repo.wheelhouse is not None and not (folder / WHEELS).is_dir():
        shutil.copytree(repo.wheelhouse, folder / f"{WHEELS}.partial", dirs_exist_ok=True)
        os.replace(folder / f"{WHEELS}.partial", folder / WHEELS)


def write_store(
    store: Path,
    records: list[TaskRecord],
    checkout_root: Path,
    io_checks: Mapping[str, list[IoCheck]],
    workspaces: Mapping[str, bytes],
    repo: RepoFiles,
    mixed_splits: bool = False,
) -> None:
    """Add `records` (replacing same ids) with their files; tasks.jsonl is replaced last and atomically, so a store
    never lists a task whose files are not all written.

    `io_checks` maps an instance id to its recorded checks; a task without any gets an empty io_checks.json.
    """
    new_ids = {record.instance_id for record in records}
    merged = [r for r in read_records(store) if r.instance_id not in new_ids] + records
    mixed = mixed_snapshots(merged)
    if mixed and not mixed_splits:
        snapshot, splits = next(iter(mixed.items()))
        raise SynthError(
            f"{store} would hold {snapshot} tasks in splits {', '.join(splits)}: a test task beside train "
            "tasks of the same snapshot has its code on display. Remedy: keep the store's split for this "
            "repository (--split), write to another store, or pass --split-by file to accept it"
        )
    store.mkdir(parents=True, exist_ok=True)
    write_repo_files(store, repo)
    for record in records:
        _write_atomic(
            store / (record.workspace_archive or workspace_archive(record.instance_id)), workspaces[record.instance_id]
        )
        hidden = hidden_dir(store, record.instance_id)
        shutil.rmtree(hidden, ignore_errors=True)
        (hidden / PRISTINE_TESTS).mkdir(parents=True)
        (hidden / SOLUTION_PATCH).write_text(record.solution_patch)
        checks = [check.model_dump() for check in io_checks.get(record.instance_id, [])]
        (hidden / IO_CHECKS).write_text(json.dumps(checks, indent=1) + "\n")
        for test_file in record.test_files:
            target = hidden / PRISTINE_TESTS / test_file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(checkout_root / test_file, target)
    partial = store / f"{RECORDS}.partial"
    partial.write_text("".join(record.model_dump_json() + "\n" for record in merged))
    os.replace(partial, store / RECORDS)
    export_parquet(store, store / PARQUET)


def export_parquet(store: Path, destination: Path) -> Path:
    """The records as one Parquet file that `datasets.load_dataset("parquet", data_files=...)` reads."""
    rows = [record.model_dump(mode="json") for record in read_records(store)]
    table = pa.Table.from_pylist(rows) if rows else pa.table({"instance_id": pa.array([], pa.string())})
    partial = destination.with_name(destination.name + ".partial")
    pq.write_table(table, partial)
    os.replace(partial, destination)
    return destination
