"""`regrow tasks merge`: shards joined into one store, every task once, resumable, refusing mixed splits (no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from proto.task_files import RECORDS, hidden_dir, read_records
from regrow.cli import app
from task_synth.errors import SynthError
from task_synth.store.candidate_journal import CandidateJournal, Judged
from task_synth.store.store_merge import merge_stores
from task_synth.store.store_writer import RepoFiles, write_store
from tests.task_synth.test_batch_and_splits import _record


def _shard(folder: Path, ids: list[str], repo: str = "r", split: str = "train") -> Path:
    records = [_record(identifier, repo=repo, split=split) for identifier in ids]
    workspaces = {identifier: f"workspace of {identifier}".encode() for identifier in ids}
    write_store(folder, records, folder, {}, workspaces, RepoFiles(f"repos/{repo}", b"install", None))
    return folder


def test_shards_join_with_every_task_once_and_a_second_merge_adds_nothing(tmp_path):
    first = _shard(tmp_path / "node-1", ["a", "b"])
    second = _shard(tmp_path / "node-2", ["b", "c"], repo="s")
    out = tmp_path / "all"
    report = merge_stores([first, second], out)
    assert [r.instance_id for r in read_records(out)] == ["a", "b", "c"]
    assert report.added == {str(first): 2, str(second): 1} and report.already_there[str(second)] == 1
    assert (out / "workspaces" / "c.tar.gz").read_bytes() == b"workspace of c"
    assert (hidden_dir(out, "a") / "solution.patch").read_text() == "diff"
    assert (out / "repos" / "s" / "install.tar.gz").read_bytes() == b"install"
    before = (out / RECORDS).read_text()
    again = merge_stores([first, second], out)
    assert sum(again.added.values()) == 0 and (out / RECORDS).read_text() == before


def test_a_merge_that_would_mix_splits_of_a_snapshot_writes_nothing(tmp_path):
    train = _shard(tmp_path / "train", ["a"])
    test = _shard(tmp_path / "test", ["b"], split="test")
    with pytest.raises(SynthError, match="in splits test, train"):
        merge_stores([train, test], tmp_path / "all")
    assert not (tmp_path / "all").exists()
    with pytest.raises(SynthError, match="no task store"):
        merge_stores([tmp_path / "missing"], tmp_path / "all")


def test_the_shards_journals_join_so_synthesis_goes_on_in_the_merged_store(tmp_path):
    first, second = _shard(tmp_path / "n1", ["a"]), _shard(tmp_path / "n2", ["b"], repo="s")
    CandidateJournal(first, "repos/r").record("m.py:f [stub]", Judged("valid", "a", 4))
    CandidateJournal(second, "repos/r").record("m.py:g [stub]", Judged("no_f2p", None, 2))
    merge_stores([first, second], tmp_path / "all")
    merge_stores([first, second], tmp_path / "all")  # nothing twice
    judged = CandidateJournal(tmp_path / "all", "repos/r").judged
    assert judged == {"m.py:f [stub]": Judged("valid", "a", 4), "m.py:g [stub]": Judged("no_f2p", None, 2)}
    lines = (tmp_path / "all" / "synth-journal" / "repos_r.jsonl").read_text().splitlines()
    assert len(lines) == 2


def test_the_cli_merges_and_says_what_each_shard_added(tmp_path):
    first, second = _shard(tmp_path / "n1", ["a"]), _shard(tmp_path / "n2", ["a", "b"])
    result = CliRunner().invoke(app, ["tasks", "merge", str(first), str(second), "--out", str(tmp_path / "all")])
    assert result.exit_code == 0, result.output
    assert "1 task(s) added, 1 already there" in " ".join(result.output.split())
    bad = CliRunner().invoke(app, ["tasks", "merge", str(tmp_path / "nope"), "--out", str(tmp_path / "all")])
    assert bad.exit_code == 1 and "no task store" in " ".join(bad.output.split())
