"""proto.dataset_files writes rows from a generator, a batch at a time, in every format `datasets` loads."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from proto.dataset_files import BATCH_ROWS, DatasetFormat, write_dataset
from tests.exported_datasets import load_exported

SCHEMA = pa.schema([("n", pa.int32()), ("text", pa.string())])
COUNT = 2 * BATCH_ROWS + 5


def rows(pulled: list[int]):
    for n in range(COUNT):
        pulled.append(n)
        yield {"n": n, "text": f"row {n}"}


def test_parquet_is_written_one_row_group_per_batch_from_a_generator(tmp_path):
    pulled: list[int] = []
    out = tmp_path / "rows.parquet"
    assert write_dataset(rows(pulled), SCHEMA, out, DatasetFormat.parquet, force=False) == COUNT
    assert len(pulled) == COUNT and pq.ParquetFile(out).metadata.num_row_groups == 3
    assert pq.read_table(out).column("n").to_pylist() == list(range(COUNT))


@pytest.mark.parametrize("fmt", list(DatasetFormat))
def test_every_format_loads_back_whole_with_datasets(tmp_path, fmt):
    out = tmp_path / f"rows.{fmt.value}"
    assert write_dataset(rows([]), SCHEMA, out, fmt, force=False) == COUNT
    loaded = load_exported(fmt, out)
    assert loaded["n"] == list(range(COUNT)) and loaded[COUNT - 1]["text"] == f"row {COUNT - 1}"
    assert sorted(path.name for path in tmp_path.iterdir()) == [out.name]  # no staging or partial file is left


@pytest.mark.parametrize("fmt", [DatasetFormat.parquet, DatasetFormat.hf])
def test_no_rows_is_an_empty_table_with_the_schema(tmp_path, fmt):
    out = tmp_path / f"none.{fmt.value}"
    assert write_dataset(iter([]), SCHEMA, out, fmt, force=False) == 0
    if fmt is DatasetFormat.parquet:
        assert pq.read_table(out).schema.names == ["n", "text"]
