"""Writing the task store (its layout is proto.task_files): records, each task's workspace archive and hidden
grader files, the repository's install archive and wheels, and a Hugging Face datasets Parquet export."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
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
    TWIN_OF,
    TWINS,
    WHEELS,
    hidden_dir,
    read_records,
    workspace_archive,
)
from proto.tasks import IoCheck, TaskRecord
from task_synth.errors import SynthError
from task_synth.store.splits import mixed_snapshots


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
    twins: Sequence[tuple[TaskRecord, str, list[IoCheck]]] = (),
) -> None:
    """Add `records` (replacing same ids) with their files; tasks.jsonl is replaced last and atomically, so a store
    never lists a task whose files are not all written.

    `io_checks` maps an instance id to its recorded checks; a task without any gets an empty io_checks.json. Each
    of `twins` (record, the original's id, checks) goes to twins.jsonl, never tasks.jsonl or the Parquet export, and
    its hidden folder names the original, for the server alone.
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
        _write_task(store, record, io_checks.get(record.instance_id, []), workspaces[record.instance_id], checkout_root)
    for twin, original, checks in twins:
        _write_task(store, twin, checks, workspaces[original], checkout_root)
        (hidden_dir(store, twin.instance_id) / TWIN_OF).write_text(original + "\n")
    if twins:
        twin_ids = {twin.instance_id for twin, _, _ in twins}
        kept = [r for r in read_records(store, TWINS) if r.instance_id not in twin_ids]
        _write_atomic(
            store / TWINS, "".join(r.model_dump_json() + "\n" for r in kept + [t for t, _, _ in twins]).encode()
        )
    partial = store / f"{RECORDS}.partial"
    partial.write_text("".join(record.model_dump_json() + "\n" for record in merged))
    os.replace(partial, store / RECORDS)
    export_parquet(store, store / PARQUET)


def _write_task(store: Path, record: TaskRecord, checks: list[IoCheck], workspace: bytes, checkout_root: Path) -> None:
    """One task's workspace archive and hidden files (pristine tests, solution, checks)."""
    _write_atomic(store / (record.workspace_archive or workspace_archive(record.instance_id)), workspace)
    hidden = hidden_dir(store, record.instance_id)
    shutil.rmtree(hidden, ignore_errors=True)
    (hidden / PRISTINE_TESTS).mkdir(parents=True)
    (hidden / SOLUTION_PATCH).write_text(record.solution_patch)
    (hidden / IO_CHECKS).write_text(json.dumps([check.model_dump() for check in checks], indent=1) + "\n")
    for test_file in record.test_files:
        target = hidden / PRISTINE_TESTS / test_file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(checkout_root / test_file, target)


def export_parquet(store: Path, destination: Path) -> Path:
    """The records as one Parquet file that `datasets.load_dataset("parquet", data_files=...)` reads."""
    rows = [record.model_dump(mode="json") for record in read_records(store)]
    table = pa.Table.from_pylist(rows) if rows else pa.table({"instance_id": pa.array([], pa.string())})
    partial = destination.with_name(destination.name + ".partial")
    pq.write_table(table, partial)
    os.replace(partial, destination)
    return destination
