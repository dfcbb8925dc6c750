"""Writing the task store (its layout is proto.task_files): records, each task's workspace archive and hidden
grader files, the repository's install archive and wheels, and a Hugging Face datasets Parquet export."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
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


def write_atomic(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all: written beside it, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def write_repo_files(store: Path, repo: RepoFiles) -> None:
    folder = store / repo.folder
    write_atomic(folder / INSTALL_ARCHIVE, repo.install_archive)
    if repo.wheelhouse is not None and not (folder / WHEELS).is_dir():
        shutil.copytree(repo.wheelhouse, folder / f"{WHEELS}.partial", dirs_exist_ok=True)
        os.replace(folder / f"{WHEELS}.partial", folder / WHEELS)


class StoreWriter:
    """Adds tasks to a store one at a time, as each is validated: its files first, then its line in tasks.jsonl,
    replaced atomically, so that a store never lists a task whose files are not all written and a run stopped at
    any point keeps every task it finished.

    `twin`, for `add`, is a task's impossible twin (record, checks): it goes to twins.jsonl, never tasks.jsonl or the
    Parquet export, and its hidden folder names the original, for the server alone.
    """

    def __init__(self, store: Path, checkout_root: Path, repo: RepoFiles, mixed_splits: bool = False):
        self.store, self.checkout_root, self.repo, self.mixed_splits = store, checkout_root, repo, mixed_splits
        self.records = {record.instance_id: record for record in read_records(store)}
        self.twins = {record.instance_id: record for record in read_records(store, TWINS)}
        self.added = 0
        self._repo_written = False

    def add(
        self,
        record: TaskRecord,
        checks: list[IoCheck],
        workspace: bytes,
        twin: tuple[TaskRecord, list[IoCheck]] | None = None,
    ) -> None:
        """Write one task (replacing one of the same id); raises SynthError before writing anything when it would
        put a repository snapshot in two splits."""
        merged = {**self.records, record.instance_id: record}
        mixed = mixed_snapshots(list(merged.values()))
        if mixed and not self.mixed_splits:
            snapshot, splits = next(iter(mixed.items()))
            raise SynthError(
                f"{self.store} would hold {snapshot} tasks in splits {', '.join(splits)}: a test task beside train "
                "tasks of the same snapshot has its code on display. Remedy: keep the store's split for this "
                "repository (--split), write to another store, or pass --split-by file to accept it"
            )
        if not self._repo_written:
            self.store.mkdir(parents=True, exist_ok=True)
            write_repo_files(self.store, self.repo)
            self._repo_written = True
        _write_task(self.store, record, checks, workspace, self.checkout_root)
        if twin is not None:
            _write_task(self.store, twin[0], twin[1], workspace, self.checkout_root)
            (hidden_dir(self.store, twin[0].instance_id) / TWIN_OF).write_text(record.instance_id + "\n")
            self.twins[twin[0].instance_id] = twin[0]
            write_lines(self.store / TWINS, self.twins.values())
        self.records = merged
        write_lines(self.store / RECORDS, merged.values())
        self.added += 1

    def close(self) -> None:
        """The Parquet export of every record; a store whose run was killed gets it from `regrow tasks export`."""
        if self.added:
            export_parquet(self.store, self.store / PARQUET)


def write_lines(path: Path, records: Iterable[TaskRecord]) -> None:
    """One record per line, replacing `path` atomically."""
    write_atomic(path, "".join(record.model_dump_json() + "\n" for record in records).encode())


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
    """Add `records` (replacing same ids) with their files and twins (record, the original's id, checks) at once."""
    writer = StoreWriter(store, checkout_root, repo, mixed_splits)
    twin_of = {original: (twin, checks) for twin, original, checks in twins}
    for record in records:
        writer.add(
            record,
            io_checks.get(record.instance_id, []),
            workspaces[record.instance_id],
            twin_of.get(record.instance_id),
        )
    writer.close()


def _write_task(store: Path, record: TaskRecord, checks: list[IoCheck], workspace: bytes, checkout_root: Path) -> None:
    """One task's workspace archive and hidden files (pristine tests, solution, checks)."""
    write_atomic(store / (record.workspace_archive or workspace_archive(record.instance_id)), workspace)
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
