"""An export read back the way a user would load it: with Hugging Face `datasets`, imported when a test reads one
(it costs every test process about 0.6 s at collection otherwise)."""

from pathlib import Path

from proto.dataset_files import DatasetFormat


def load_exported(fmt: DatasetFormat, out: Path):
    from datasets import load_dataset, load_from_disk

    if fmt is DatasetFormat.hf:
        return load_from_disk(str(out))
    return load_dataset("json" if fmt is DatasetFormat.jsonl else "parquet", data_files=str(out), split="train")


def load_saved(out: Path):
    """A dataset saved with `save_to_disk` (the hf format)."""
    return load_exported(DatasetFormat.hf, out)
