"""`regrow tasks merge`: task stores written apart (one per node, one per repository job) joined into one.

Every task is counted once: a task id already in the output is kept as it is, whichever shard brings it again (the
same id is the same snapshot, mode and unit). Each task's files are copied before the records that list it, and the
records are replaced last and atomically, so a merge stopped halfway leaves the output as it was, plus files no
record lists yet, and running it again finishes it. The candidate journals are joined too, so that `regrow synth`
into the merged store goes on where the shards stopped.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from proto.task_files import RECORDS, TWINS, hidden_dir, read_records
from proto.tasks import TaskRecord
from task_synth.errors import SynthError
from task_synth.store.candidate_journal import JOURNAL_DIR
from task_synth.store.splits import mixed_snapshots
from task_synth.store.store_writer import export_parquet, write_atomic, write_lines


@dataclass
class MergeReport:
    """What a merge added and what it found already there, per shard."""

    added: dict[str, int] = field(default_factory=dict)
    already_there: dict[str, int] = field(default_factory=dict)
    total: int = 0


def merge_stores(shards: list[Path], out: Path) -> MergeReport:
    """Join `shards` into the store `out` (made when missing); raises SynthError before writing anything when a
    shard is no store or the join would put one repository snapshot in two splits."""
    for shard in shards:
        if not (shard / RECORDS).is_file():
            raise SynthError(f"{shard} is no task store (it has no {RECORDS}): pass folders that `regrow synth` wrote")
        if shard.resolve() == out.resolve():
            raise SynthError(f"{shard} is the output store itself: pass the shards and a separate --out")
    records = {record.instance_id: record for record in read_records(out)}
    twins = {record.instance_id: record for record in read_records(out, TWINS)}
    plan: list[tuple[Path, list[TaskRecord], list[TaskRecord]]] = []
    report = MergeReport()
    for shard in shards:
        listed = read_records(shard)
        fresh = [record for record in listed if record.instance_id not in records]
        fresh_twins = [twin for twin in read_records(shard, TWINS) if twin.instance_id not in twins]
        report.already_there[str(shard)] = len(listed) - len(fresh)
        report.added[str(shard)] = len(fresh)
        records.update((record.instance_id, record) for record in fresh)
        twins.update((twin.instance_id, twin) for twin in fresh_twins)
        plan.append((shard, fresh, fresh_twins))
    mixed = mixed_snapshots(list(records.values()))
    if mixed:
        snapshot, splits = next(iter(mixed.items()))
        raise SynthError(
            f"the merged store would hold {snapshot} tasks in splits {', '.join(splits)}: a test task beside train "
            "tasks of the same snapshot has its code on display. Remedy: synthesize every shard with the same --split "
            "for a repository"
        )
    out.mkdir(parents=True, exist_ok=True)
    for shard, fresh, fresh_twins in plan:
        for record in [*fresh, *fresh_twins]:
            _copy_task(shard, out, record)
        _join_journals(shard, out)
    write_lines(out / TWINS, twins.values())
    write_lines(out / RECORDS, records.values())
    export_parquet(out, out / "tasks.parquet")
    report.total = len(records)
    return report


def _copy_task(shard: Path, out: Path, record: TaskRecord) -> None:
    """A task's workspace archive, hidden folder and repository folder (when the output lacks it)."""
    if record.workspace_archive:
        write_atomic(out / record.workspace_archive, (shard / record.workspace_archive).read_bytes())
    _copy_folder(hidden_dir(shard, record.instance_id), hidden_dir(out, record.instance_id), replace=True)
    if record.repo_dir:
        _copy_folder(shard / record.repo_dir, out / record.repo_dir, replace=False)


def _copy_folder(source: Path, target: Path, replace: bool) -> None:
    if target.exists() and not replace:
        return
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)


def _join_journals(shard: Path, out: Path) -> None:
    """Each snapshot's journal lines of the shard, after those the output has (a candidate judged twice is judged)."""
    folder = shard / JOURNAL_DIR
    if not folder.is_dir():
        return
    for journal in sorted(folder.glob("*.jsonl")):
        target = out / JOURNAL_DIR / journal.name
        have = set(target.read_text().splitlines()) if target.exists() else set()
        lines = [line for line in journal.read_text().splitlines() if line.strip() and line not in have]
        if lines:
            existing = target.read_text() if target.exists() else ""
            write_atomic(target, (existing + "".join(line + "\n" for line in lines)).encode())
