"""Many repositories in one store (resume, failures recorded), splits per repository, difficulty spread (no Docker)."""

from datetime import UTC, datetime

import pytest

from proto.tasks import TaskRecord, TaskStats
from task_synth import batch
from task_synth.batch import read_sources, read_state, synthesize_many
from task_synth.errors import SynthError
from task_synth.pipeline import SynthReport
from task_synth.settings import SynthSettings
from task_synth.store.difficulty import spread
from task_synth.store.splits import mixed_snapshots, split_of
from task_synth.store.store_writer import RepoFiles, write_store


def _record(identifier: str, repo="r", commit="c" * 40, split="train", lines=3, statement="p") -> TaskRecord:
    return TaskRecord(
        instance_id=identifier,
        repo=repo,
        source_commit=commit,
        image="i",
        workspace_archive=f"workspaces/{identifier}.tar.gz",
        repo_dir=f"repos/{repo}",
        mode="stub",
        deleted=[],
        problem_statement=statement,
        FAIL_TO_PASS=["t"],
        PASS_TO_PASS=["u"],
        test_command="pytest",
        solution_patch="diff",
        split=split,
        stats=TaskStats(
            lines_deleted=lines, covering_tests=2, complexity=1, fail_to_pass=1, statement_chars=len(statement)
        ),
        created_at=datetime.now(UTC),
        synth_version="0",
    )


def test_repos_file_takes_a_source_and_an_optional_ref_per_line(tmp_path):
    listing = tmp_path / "repos.txt"
    listing.write_text("# corpus\n/src/a\n\nhttps://example.org/b.git v1.2  # pinned\n")
    assert read_sources(listing) == [("/src/a", None), ("https://example.org/b.git", "v1.2")]
    listing.write_text("a b c\n")
    with pytest.raises(SynthError, match="repos.txt:1: expected `source \\[ref\\]`"):
        read_sources(listing)
    with pytest.raises(SynthError, match="not found"):
        read_sources(tmp_path / "missing.txt")


def test_a_batch_records_each_repository_and_a_rerun_skips_the_finished_ones(tmp_path, monkeypatch):
    calls = []

    def fake_synthesize(source, store, settings, backend, on_progress):
        calls.append((source, settings.ref))
        if source == "broken":
            raise SynthError("broken has no tests: pick a repository with a pytest suite")
        if source == "interrupted":
            raise KeyboardInterrupt
        return SynthReport(repo=source, records=[_record(f"{source}-1", repo=source)], candidates=4, wall_s=2.0)

    monkeypatch.setattr(batch, "synthesize", fake_synthesize)
    sources = [("good", "v1"), ("broken", None), ("interrupted", None), ("later", None)]
    with pytest.raises(KeyboardInterrupt):
        synthesize_many(sources, tmp_path, SynthSettings(), backend=object())
    state = read_state(tmp_path)
    assert state["good@v1"].status == "done" and state["good@v1"].valid == 1
    assert state["broken"].status == "failed" and "has no tests" in state["broken"].error
    assert "interrupted" not in state and "later" not in state
    calls.clear()
    monkeypatch.setattr(batch, "synthesize", lambda source, *rest: SynthReport(repo=source, wall_s=1.0))
    state, _ = synthesize_many(sources, tmp_path, SynthSettings(), backend=object())
    assert calls == []  # the rerun never redid "good" or "broken"
    assert state["interrupted"].status == "done" and state["later"].status == "done"


def test_the_split_is_drawn_per_repository_unless_asked_per_file():
    fixed = split_of("r", "a.py", fixed="validation", by="repo", test_fraction=0.5)
    assert fixed == "validation"
    per_repo = {
        split_of(f"repo{n}", path, fixed=None, by="repo", test_fraction=0.3)
        for n in range(50)
        for path in ("a.py", "b.py")
    }
    assert per_repo == {"train", "test"}
    for n in range(50):  # every file of one repository lands in the same split
        assert len({split_of(f"repo{n}", f"m{k}.py", fixed=None, by="repo", test_fraction=0.3) for k in range(10)}) == 1
    assert {split_of("r", f"m{k}.py", fixed=None, by="file", test_fraction=0.5) for k in range(40)} == {"train", "test"}
    assert split_of("r", "a.py", fixed=None, by="repo", test_fraction=0.0) == "train"


def test_a_store_refuses_test_and_train_tasks_of_one_snapshot(tmp_path):
    repo = RepoFiles("repos/r", b"install", None)
    write_store(tmp_path, [_record("a", split="train")], tmp_path, {}, {"a": b"ws"}, repo)
    with pytest.raises(SynthError, match="splits test, train"):
        write_store(tmp_path, [_record("b", split="test")], tmp_path, {}, {"b": b"ws"}, repo)
    assert [line for line in (tmp_path / "tasks.jsonl").read_text().splitlines()] and not (
        tmp_path / "workspaces/b.tar.gz"
    ).exists()
    write_store(
        tmp_path, [_record("c", split="test", commit="d" * 40)], tmp_path, {}, {"c": b"ws"}, repo
    )  # another snapshot
    write_store(tmp_path, [_record("b", split="test")], tmp_path, {}, {"b": b"ws"}, repo, mixed_splits=True)
    assert list(mixed_snapshots([_record("a"), _record("b", split="test")])) == ["r@cccccccccccc"]


def test_difficulty_spread_is_min_median_max_of_each_signal():
    records = [
        _record("a", lines=1, statement="x" * 10),
        _record("b", lines=5, statement="x" * 30),
        _record("c", lines=9),
    ]
    found = spread(records)
    assert found["lines deleted"] == {"min": 1, "median": 5, "max": 9}
    assert found["problem statement chars"] == {"min": 1, "median": 10, "max": 30}
    assert spread([]) == {}


def test_the_spread_has_the_features_size_and_the_kill_rate_where_measured():
    from proto.tasks import DeletedUnit

    unit = DeletedUnit(path="m.py", qualname="f", kind="function", start_line=1, end_line=3)
    records = [_record(name) for name in "abc"]
    records[0] = records[0].model_copy(update={"deleted": [unit, unit]})
    records[1].stats.mutant_kill_rate, records[2].stats.mutant_kill_rate = 0.9, 1.0
    found = spread(records)
    assert found["units deleted"] == {"min": 0, "median": 0, "max": 2}
    assert found["mutant kill rate"] == {"min": 0.9, "median": 0.95, "max": 1.0}  # the task with none left out
    assert "mutant kill rate" not in spread(records[:1])
