"""`regrow tasks export`: a task store as a Hugging Face `datasets` dataset with SWE-bench's field names.

How our records map onto SWE-bench's (princeton-nlp/SWE-bench):
- `base_commit` and `environment_setup_commit` are the repository snapshot the task was cut from (our
  `source_commit`), and `version` is its short form: one repository image serves every task of a snapshot.
  The agent starts from that snapshot with the unit deleted, i.e. `patch` applied in reverse.
- `patch` is the solution (deleted state -> snapshot). `test_patch` is empty: the tests run are the
  snapshot's own, unchanged; the grader's pristine copies and hidden checks stay in the store's hidden/.
- `FAIL_TO_PASS` and `PASS_TO_PASS` are JSON-encoded lists of pytest node ids, as SWE-bench stores them.
- `created_at` is a UTC timestamp (SWE-bench has ISO text; `datasets` reads ISO text in JSON as a timestamp
  anyway), and `hints_text` is empty, as SWE-bench's is for an issue with no hints.
regrow's own fields follow: split, image, test command, deletion mode and units, difficulty signals.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from proto.dataset_files import DatasetFormat, check_output, write_dataset
from proto.task_files import RECORDS, read_records
from proto.tasks import TaskRecord

log = logging.getLogger(__name__)

SWE_BENCH_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
)
TASK_SCHEMA = pa.schema(
    [(name, pa.timestamp("us", tz="UTC") if name == "created_at" else pa.string()) for name in SWE_BENCH_FIELDS]
    + [
        ("split", pa.string()),
        ("image", pa.string()),
        ("test_command", pa.string()),
        ("mode", pa.string()),
        (
            "deleted",
            pa.list_(
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("qualname", pa.string()),
                        ("kind", pa.string()),
                        ("start_line", pa.int32()),
                        ("end_line", pa.int32()),
                    ]
                )
            ),
        ),
        ("lines_deleted", pa.int32()),
        ("covering_tests", pa.int32()),
        ("complexity", pa.int32()),
        ("statement_chars", pa.int32()),
        ("synth_version", pa.string()),
    ]
)


class TaskExportError(Exception):
    """The export cannot start: the task store is missing or holds no tasks."""


def export_tasks(store: Path, out: Path, fmt: DatasetFormat, force: bool = False) -> int:
    """Write every task of the store `store` to `out`; returns the number of tasks."""
    check_output(out, force)
    if not (store / RECORDS).is_file():
        raise TaskExportError(f"no task store at {store} ({RECORDS} is missing): make one with `regrow synth --out`")
    try:
        records = read_records(store)
    except ValidationError as error:
        raise TaskExportError(f"{store / RECORDS} has a line that is not a TaskRecord: {error}") from error
    if not records:
        raise TaskExportError(f"{store / RECORDS} holds no tasks: run `regrow synth --out {store}` first")
    count = write_dataset([swe_bench_row(record) for record in records], TASK_SCHEMA, out, fmt, force)
    log.info("exported %d tasks from %s to %s (%s)", count, store, out, fmt.value)
    return count


def swe_bench_row(record: TaskRecord) -> dict[str, Any]:
    """One dataset row of `TASK_SCHEMA`: SWE-bench's fields, then regrow's."""
    return {
        "instance_id": record.instance_id,
        "repo": record.repo,
        "base_commit": record.source_commit,
        "patch": record.solution_patch,
        "test_patch": "",
        "problem_statement": record.problem_statement,
        "hints_text": "",
        "created_at": record.created_at,
        "version": record.source_commit[:12],
        "FAIL_TO_PASS": json.dumps(record.FAIL_TO_PASS),
        "PASS_TO_PASS": json.dumps(record.PASS_TO_PASS),
        "environment_setup_commit": record.source_commit,
        "split": record.split,
        "image": record.image,
        "test_command": record.test_command,
        "mode": record.mode,
        "deleted": [unit.model_dump() for unit in record.deleted],
        "lines_deleted": record.stats.lines_deleted,
        "covering_tests": record.stats.covering_tests,
        "complexity": record.stats.complexity,
        "statement_chars": record.stats.statement_chars,
        "synth_version": record.synth_version,
    }
