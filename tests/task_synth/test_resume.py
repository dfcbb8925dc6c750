"""Nothing finished is lost: each task reaches the store when it is validated, a stopped run keeps what it made, and a
rerun goes on where the last one stopped (no Docker: the candidates' validation is scripted)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from proto.task_files import read_records
from sandbox.lifecycle.memory_backend import MemoryBackend
from task_synth import pipeline
from task_synth.repository.repo_image import SYNTH_LABEL
from task_synth.settings import SynthSettings
from task_synth.setup_failures import SYNTHESIS_ERROR
from task_synth.store.candidate_journal import JOURNAL_DIR, CandidateJournal
from task_synth.store.store_writer import RepoFiles, StoreWriter
from task_synth.store.task_builder import BuiltTask
from tests.task_synth.test_batch_and_splits import _record

SNAPSHOT = "repos/r-cccccccccccc"
CANDIDATES = [(SimpleNamespace(key=f"pkg/m.py:f{index}"), "stub") for index in range(8)]


class Scripted:
    """`_candidate` by script: odd candidates are valid, even ones rejected as no_f2p; one may raise Ctrl-C."""

    def __init__(self, store, interrupt_at: str | None = None, errors: dict[str, Exception] | None = None):
        self.store, self.interrupt_at, self.errors, self.tried = store, interrupt_at, errors or {}, []

    def __call__(self, context, pool, unit, mode, kept):
        self.tried.append(unit.key)
        if unit.key == self.interrupt_at:
            raise KeyboardInterrupt
        if unit.key in self.errors:
            raise self.errors[unit.key]
        number = int(unit.key.rsplit("f", 1)[1])
        if number % 2 == 0:
            return BuiltTask(None, "no_f2p", None, 3, "no test fails"), 3
        # Every task validated before this one is in the store already.
        listed = {record.instance_id for record in read_records(self.store)}
        assert {f"task-{n}" for n in range(1, number, 2) if f"pkg/m.py:f{n}" not in self.errors} <= listed
        record = _record(f"task-{number}").model_copy(update={"FAIL_TO_PASS": [f"t{number}"]})
        return BuiltTask(record, None, b"workspace", 5), 5


def _run(store, script, max_tasks=100, monkeypatch=None, backend=None):
    monkeypatch.setattr(pipeline, "_candidate", script)
    report = pipeline.SynthReport()
    writer = StoreWriter(store, store, RepoFiles(SNAPSHOT, b"install", None))
    context = SimpleNamespace(sandbox_pool=lambda size: contextlib.nullcontext(), backend=backend or MemoryBackend())
    settings = SynthSettings(max_tasks=max_tasks, jobs=1, twins=False)
    try:
        pipeline._run_candidates(
            context, CANDIDATES, settings, report, lambda *_: None, writer, CandidateJournal(store, SNAPSHOT)
        )
    finally:
        writer.close()
    return report


def test_each_task_is_in_the_store_when_it_is_validated_and_a_stop_keeps_them(tmp_path, monkeypatch):
    script = Scripted(tmp_path, interrupt_at="pkg/m.py:f5")
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, script, monkeypatch=monkeypatch)
    assert [record.instance_id for record in read_records(tmp_path)] == ["task-1", "task-3"]
    assert (tmp_path / "workspaces" / "task-3.tar.gz").read_bytes() == b"workspace"
    assert (tmp_path / SNAPSHOT / "install.tar.gz").read_bytes() == b"install"
    assert (tmp_path / "tasks.parquet").exists()  # written on the way out


def test_a_stop_removes_the_sandboxes_of_the_candidates_in_flight_and_no_other(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM ends the suites running in this run's sandboxes at once (mpmath's took 70 s to end)."""
    backend = MemoryBackend({"img": {}})
    validating = backend.create("img", labels={SYNTH_LABEL: "validate"})
    oracle = backend.create("img", labels={SYNTH_LABEL: "oracle"})
    episode = backend.create("img")  # not synthesis's: an env server's in the same process, say
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, Scripted(tmp_path, interrupt_at="pkg/m.py:f1"), monkeypatch=monkeypatch, backend=backend)
    assert validating.destroyed and oracle.destroyed and not episode.destroyed
    assert backend.live_ids() == {episode.id}


def test_a_rerun_goes_on_where_the_stopped_run_stopped_and_counts_nothing_twice(tmp_path, monkeypatch):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, Scripted(tmp_path, interrupt_at="pkg/m.py:f5"), monkeypatch=monkeypatch)
    again = Scripted(tmp_path)
    report = _run(tmp_path, again, monkeypatch=monkeypatch)
    assert again.tried == [f"pkg/m.py:f{n}" for n in range(5, 8)]  # f0..f4 were judged: valid or rejected
    assert report.skipped == 5 and report.resumed == 2 and report.valid == 2
    assert [r.instance_id for r in read_records(tmp_path)] == ["task-1", "task-3", "task-5", "task-7"]
    third = Scripted(tmp_path)
    assert _run(tmp_path, third, monkeypatch=monkeypatch).resumed == 4 and third.tried == []


def test_tasks_of_an_earlier_run_count_toward_max_tasks(tmp_path, monkeypatch):
    _run(tmp_path, Scripted(tmp_path), max_tasks=2, monkeypatch=monkeypatch)
    assert len(read_records(tmp_path)) == 2
    more = Scripted(tmp_path)
    report = _run(tmp_path, more, max_tasks=3, monkeypatch=monkeypatch)
    assert report.resumed == 2 and report.valid == 1 and more.tried == ["pkg/m.py:f4", "pkg/m.py:f5"]


def test_a_torn_journal_line_is_judged_again(tmp_path, monkeypatch):
    _run(tmp_path, Scripted(tmp_path), max_tasks=1, monkeypatch=monkeypatch)
    journal = tmp_path / JOURNAL_DIR / f"{SNAPSHOT.replace('/', '_')}.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed while writing the second line
    again = Scripted(tmp_path)
    _run(tmp_path, again, max_tasks=2, monkeypatch=monkeypatch)
    assert again.tried[0] == "pkg/m.py:f1"
    assert [r.instance_id for r in read_records(tmp_path)] == ["task-1", "task-3"]


def test_a_task_that_repeats_a_kept_one_is_rejected_as_a_duplicate_and_not_counted(tmp_path, monkeypatch):
    from proto.tasks import DeletedUnit

    unit = DeletedUnit(path="pkg/m.py", qualname="f", kind="function", start_line=3, end_line=9)

    def scripted(context, pool, candidate, mode, kept):
        number = int(candidate.key.rsplit("f", 1)[1])
        same_lines = [unit] if number in (1, 3) else []  # f1 and f3 delete the same lines
        tests = ["t5"] if number in (5, 7) else [f"t{number}"]  # f5 and f7 break the same tests
        record = _record(f"task-{number}").model_copy(update={"FAIL_TO_PASS": tests, "deleted": same_lines})
        return BuiltTask(record, None, b"workspace", 1), 1

    report = _run(tmp_path, scripted, monkeypatch=monkeypatch)
    assert [r.instance_id for r in read_records(tmp_path)] == [f"task-{n}" for n in (0, 1, 2, 4, 5, 6)]
    assert report.rejections["duplicate"] == 2 and report.valid == 6


def test_a_validated_candidate_is_known_for_a_repeat_before_its_task_is_built():
    from proto.tasks import DeletedUnit
    from task_synth.store.repeats import KeptTasks

    unit = DeletedUnit(path="pkg/m.py", qualname="f", kind="function", start_line=3, end_line=9)
    kept = KeptTasks([_record("task-1").model_copy(update={"FAIL_TO_PASS": ["t1", "t2"], "deleted": [unit]})])
    snapshot = f"{_record('x').repo}@{_record('x').source_commit}"
    assert "task-1" in (kept.repeated_before_build(snapshot, [("pkg/m.py", 3, 9)], ["t9"]) or "")
    assert "task-1" in (kept.repeated_before_build(snapshot, [("pkg/m.py", 1, 2)], ["t2", "t1"]) or "")
    assert kept.repeated_before_build(snapshot, [("pkg/m.py", 1, 2)], ["t1"]) is None
    assert kept.repeated_before_build("other@0", [("pkg/m.py", 3, 9)], ["t1", "t2"]) is None


def test_a_group_that_holds_a_kept_task_and_more_is_not_its_repeat_though_the_same_tests_fail():
    """more-itertools: `bucket.__init__` alone was kept, and the group of it with `_get_values` (where the logic and
    the checks that kill its mutants are) was rejected for having its FAIL_TO_PASS tests."""
    from proto.tasks import DeletedUnit
    from task_synth.store.repeats import KeptTasks

    init = DeletedUnit(path="pkg/m.py", qualname="B.__init__", kind="method", start_line=3, end_line=9)
    kept = KeptTasks([_record("task-1").model_copy(update={"FAIL_TO_PASS": ["t1", "t2"], "deleted": [init]})])
    snapshot = f"{_record('x').repo}@{_record('x').source_commit}"
    group = [("pkg/m.py", 3, 9), ("pkg/m.py", 11, 20)]
    assert kept.repeated_before_build(snapshot, group, ["t1", "t2"]) is None
    assert "task-1" in (kept.repeated_before_build(snapshot, [("pkg/m.py", 11, 20)], ["t1", "t2"]) or "")
    values = DeletedUnit(path="pkg/m.py", qualname="B._get_values", kind="method", start_line=11, end_line=20)
    # and a group kept first makes its member alone a repeat
    assert "task-2" in (
        KeptTasks(
            [_record("task-2").model_copy(update={"FAIL_TO_PASS": ["t1"], "deleted": [init, values]})]
        ).repeated_before_build(snapshot, [("pkg/m.py", 3, 9)], ["t1"])
        or ""
    )


def test_a_candidate_that_deletes_a_kept_tasks_lines_is_a_duplicate_without_being_validated():
    from proto.tasks import DeletedUnit
    from task_synth.candidates.units import Unit
    from task_synth.store.repeats import KeptTasks

    record = _record("task-1").model_copy(
        update={"deleted": [DeletedUnit(path="pkg/m.py", qualname="f", kind="function", start_line=3, end_line=9)]}
    )
    context = SimpleNamespace(checkout=SimpleNamespace(repo_name=record.repo, commit=record.source_commit))
    same = Unit("pkg/m.py", "f", "function", 3, 9, ((4, 9),), 5, 2)
    built, executions = pipeline._candidate(context, None, same, "remove", KeptTasks([record]))  # no pool: not run
    assert built is not None and (built.rejection, executions) == ("duplicate", 0) and "task-1" in built.detail


def test_an_unexpected_error_rejects_its_candidate_and_the_run_goes_on(tmp_path, monkeypatch):
    """A bug met on one candidate ended the whole run (its tasks kept, but hours of candidates left unjudged)."""
    script = Scripted(tmp_path, errors={"pkg/m.py:f3": ValueError("libcst could not print it")})
    report = _run(tmp_path, script, monkeypatch=monkeypatch)
    assert [record.instance_id for record in read_records(tmp_path)] == ["task-1", "task-5", "task-7"]
    assert report.rejections[SYNTHESIS_ERROR] == 1
    rerun = Scripted(tmp_path)
    _run(tmp_path, rerun, monkeypatch=monkeypatch)
    assert rerun.tried == ["pkg/m.py:f3"]  # not journaled: a fixed regrow judges it again


def test_the_engine_going_away_still_ends_the_run(tmp_path, monkeypatch):
    from sandbox.errors import SandboxGone

    with pytest.raises(SandboxGone):
        _run(tmp_path, Scripted(tmp_path, errors={"pkg/m.py:f2": SandboxGone("gone")}), monkeypatch=monkeypatch)


def test_the_same_unexpected_error_on_the_first_candidates_stops_the_run_and_says_it_is_regrows(tmp_path, monkeypatch):
    errors = {key: TypeError("unhashable type: 'list'") for key in (f"pkg/m.py:f{n}" for n in range(8))}
    with pytest.raises(pipeline.SynthError, match="regrow's bug"):
        _run(tmp_path, Scripted(tmp_path, errors=errors), monkeypatch=monkeypatch)
