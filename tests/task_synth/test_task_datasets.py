"""`regrow tasks export` writes a task store as a dataset with SWE-bench's field names, loadable with `datasets`."""

import json
from datetime import datetime

import pytest
from typer.testing import CliRunner

from proto.dataset_files import DatasetFormat
from proto.task_files import RECORDS
from regrow.cli import app as regrow_app
from task_synth.store.task_export import SWE_BENCH_FIELDS, TaskExportError, export_tasks
from tests.exported_datasets import load_exported, load_saved
from tests.task_fixture import DEMO_TASK_ID, F2P, P2P, SOLUTION_PATCH, demo_record

IMAGE = "regrow/demo-repo:test"


@pytest.fixture
def task_store(tmp_path):
    """A store of two tasks: the hand-made demo task and a copy of it in the test split."""
    store = tmp_path / "store"
    store.mkdir()
    demo = demo_record(IMAGE)
    held_out = demo.model_copy(update={"instance_id": "demo__calc-clamp-2", "split": "test"})
    (store / RECORDS).write_text("".join(r.model_dump_json() + "\n" for r in (demo, held_out)))
    return store


load = load_exported


@pytest.mark.parametrize("fmt", list(DatasetFormat))
def test_every_format_loads_with_datasets_under_swe_bench_names(task_store, tmp_path, fmt):
    out = tmp_path / f"tasks.{fmt.value}"
    assert export_tasks(task_store, out, fmt) == 2
    dataset = load(fmt, out)
    assert set(SWE_BENCH_FIELDS) <= set(dataset.column_names)
    row = next(r for r in dataset if r["instance_id"] == DEMO_TASK_ID)
    assert row["repo"] == "demo/calc" and row["base_commit"] == "0" * 40 and row["patch"] == SOLUTION_PATCH
    # SWE-bench keeps the test lists as JSON text; they come back as the record's node ids.
    assert json.loads(row["FAIL_TO_PASS"]) == F2P and json.loads(row["PASS_TO_PASS"]) == P2P
    assert row["problem_statement"].startswith("Implement `clamp(value, low, high)`")
    assert row["created_at"].replace(tzinfo=None) == datetime(2026, 1, 1)
    assert row["split"] == "train" and row["image"] == IMAGE and row["lines_deleted"] == 3
    assert [unit["qualname"] for unit in row["deleted"]] == ["clamp"]
    assert sorted(dataset["split"]) == ["test", "train"]


def test_the_cli_exports_a_store_for_datasets(task_store, tmp_path):
    out = tmp_path / "tasks_hf"
    result = CliRunner().invoke(regrow_app, ["tasks", "export", "--store", str(task_store), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert load_saved(out).num_rows == 2
    assert "difficulty of 2 tasks" in result.output and "units deleted" in result.output


def test_a_folder_without_tasks_jsonl_is_an_error_that_names_regrow_synth(tmp_path):
    with pytest.raises(TaskExportError, match="regrow synth"):
        export_tasks(tmp_path, tmp_path / "out.parquet", DatasetFormat.parquet)
    assert not (tmp_path / "out.parquet").exists()


def test_an_empty_store_is_an_error(tmp_path):
    (tmp_path / RECORDS).write_text("")
    with pytest.raises(TaskExportError, match="holds no tasks"):
        export_tasks(tmp_path, tmp_path / "out.jsonl", DatasetFormat.jsonl)


def test_an_existing_output_is_kept_unless_forced(task_store, tmp_path):
    out = tmp_path / "tasks.parquet"
    out.write_text("mine")
    args = ["tasks", "export", "--store", str(task_store), "--out", str(out), "--format", "parquet"]
    result = CliRunner().invoke(regrow_app, args)
    assert result.exit_code == 1 and "already exists" in result.output and out.read_text() == "mine"
    assert CliRunner().invoke(regrow_app, [*args, "--force"]).exit_code == 0
    assert load(DatasetFormat.parquet, out).num_rows == 2
