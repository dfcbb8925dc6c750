"""Re-grading's pure logic (no engine): the stored change set round-trips, the workspace rebuilt from it reads back as
the same change set, and an older episode's whole diff rebuilds its change set, while an incomplete one is refused.
"""

import hashlib
import json
import sqlite3
import zlib
from collections.abc import Collection
from contextlib import closing
from datetime import UTC, datetime

import pytest

from env_server.grading.applied_diff import NotReplayable, change_set_from_diff
from env_server.grading.change_set import ChangeSet, Entry, Tree, compare, read_tree
from env_server.grading.diff import MAX_DIFF_LINES, submission_diff
from env_server.grading.path_policy import PathPolicy
from env_server.lifecycle.reset_options import ResetOptions
from env_server.traces.regrade import Regraded, RegradeReport, RegradeTotals, Skipped, workspace_tar
from env_server.traces.store import TraceStore
from env_server.traces.submissions import decode_change_set, encode_change_set
from proto.traces import EpisodeTrace

OPS = (
    b'"""Ops."""\n\n\ndef add(a, b):\n    return a + b\n\n\n'
    b"def clamp(value, low, high):\n    raise NotImplementedError\n"
)
CLAMP = OPS.replace(b"    raise NotImplementedError\n", b"    return max(low, min(value, high))\n")


def file(data: bytes, executable: bool = False) -> Entry:
    return Entry("file", executable, hashlib.sha256(data).hexdigest(), len(data))


def full_tree(files: dict[str, bytes], executable: Collection[str] = (), links: dict[str, str] | None = None) -> Tree:
    """A task's whole workspace: its folders, files (every byte kept) and links."""
    entries = {path: file(data, path in executable) for path, data in files.items()}
    for path in files:
        folder = path.rpartition("/")[0]
        while folder:
            entries[folder] = Entry("dir")
            folder = folder.rpartition("/")[0]
    entries.update({path: Entry("link", digest=target) for path, target in (links or {}).items()})
    return Tree(entries=entries, data=dict(files))


def as_graded(tree: Tree) -> Tree:
    """The tree as the grader keeps it: the bytes of Python sources only (so other files diff as whole texts)."""
    return Tree(entries=tree.entries, data={path: data for path, data in tree.data.items() if path.endswith(".py")})


def same_changes(left: ChangeSet, right: ChangeSet) -> bool:
    return (left.written, left.executable, sorted(left.deleted)) == (
        right.written,
        right.executable,
        sorted(right.deleted),
    )


TASK = full_tree(
    {
        "calc/__init__.py": b"",
        "calc/ops.py": OPS,
        "calc/table.csv": b"a,b\n1,2\n",
        "calc/old.py": b"X = 1\nY = 2\n",
        "scripts/run.sh": b"#!/bin/sh\necho hi\n",
        "README.md": b"# calc\n",
        "tests/test_ops.py": b"from calc.ops import add\n",
    },
    executable={"scripts/run.sh"},
    links={"docs": "README.md"},
)
POLICY = PathPolicy.for_task(["tests/test_ops.py"], ["calc/ops.py"], TASK.files())


def test_a_change_set_round_trips_through_its_stored_form_without_its_refusals():
    changes = ChangeSet(
        written={"calc/ops.py": CLAMP, "data/blob.bin": bytes(range(256)) * 64},
        executable={"data/blob.bin"},
        deleted=["calc/old.py"],
        refused={"tests/test_ops.py": "a test file"},
    )
    blob = encode_change_set(changes)
    back = decode_change_set(blob)
    assert same_changes(back, changes)
    assert back.refused == {}
    assert len(blob) < len(CLAMP) + 256 * 64  # compressed


def test_a_stored_form_of_another_version_is_refused_with_the_remedy():
    blob = zlib.compress(json.dumps({"version": 99, "written": {}, "executable": [], "deleted": []}).encode())
    with pytest.raises(NotReplayable, match="format 99"):
        decode_change_set(blob)


def test_the_trace_store_keeps_a_graded_change_set_by_episode(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite")
    try:
        store.start_episode(
            EpisodeTrace(
                episode_id="e1",
                task_id="t",
                problem_statement="",
                tools=[],
                status="running",
                started_at=datetime.now(UTC),
            )
        )
        changes = ChangeSet(written={"calc/ops.py": CLAMP}, executable={"calc/ops.py"}, deleted=["calc/old.py"])
        store.add_submission("e1", changes)
        stored = store.get_submission("e1")
        assert stored is not None and same_changes(stored, changes)
        assert store.get_submission("e2") is None
    finally:
        store.close()
    reopened = TraceStore(tmp_path / "traces.sqlite")  # it survives a restart, and a second open adds no table twice
    try:
        stored = reopened.get_submission("e1")
        assert stored is not None and stored.written == {"calc/ops.py": CLAMP}
    finally:
        reopened.close()


def test_the_rebuilt_workspace_reads_back_as_the_same_change_set():
    changes = ChangeSet(
        written={"calc/ops.py": CLAMP, "calc/extra.py": b"Z = 3\n", "scripts/run.sh": b"#!/bin/sh\necho bye\n"},
        executable={"calc/extra.py"},  # a new executable; run.sh loses its bit
        deleted=["calc/old.py", "docs"],
    )
    submitted = read_tree([workspace_tar(TASK, changes)], lambda path, entry: TASK.entries.get(path) != entry)
    again = compare(TASK, submitted, POLICY, 5 * 1024 * 1024)
    assert same_changes(again, changes)
    assert again.refused == {}


def test_an_unchanged_workspace_reads_back_as_no_change():
    submitted = read_tree([workspace_tar(TASK, ChangeSet())], lambda path, entry: TASK.entries.get(path) != entry)
    assert submitted.entries == TASK.entries
    assert same_changes(compare(TASK, submitted, POLICY, 5 * 1024 * 1024), ChangeSet())


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(ChangeSet(written={"calc/ops.py": CLAMP}), id="a modified source"),
        pytest.param(ChangeSet(written={"calc/new.py": b"A = 1\nB = 2"}), id="a new file without a last newline"),
        pytest.param(ChangeSet(written={"calc/empty.py": b""}), id="a new empty file"),
        pytest.param(ChangeSet(written={"calc/ops.py": OPS.rstrip(b"\n")}), id="a last newline removed"),
        pytest.param(ChangeSet(deleted=["calc/old.py"]), id="a deleted source"),
        pytest.param(ChangeSet(deleted=["calc/table.csv"]), id="a deleted file the grader keeps no text of"),
        pytest.param(ChangeSet(written={"calc/table.csv": b"a,b\n3,4\n"}), id="a data file rewritten whole"),
        pytest.param(
            ChangeSet(written={"calc/ops.py": OPS}, executable={"calc/ops.py"}),
            id="only the executable bit set",
        ),
        pytest.param(
            ChangeSet(written={"scripts/run.sh": b"#!/bin/sh\necho bye\n"}, executable={"scripts/run.sh"}),
            id="an executable keeps its bit",
        ),
        pytest.param(
            ChangeSet(
                written={
                    "calc/ops.py": CLAMP.replace(b"a + b", b"b + a"),
                    "calc/__init__.py": b"from .ops import add\n",
                },
                deleted=["calc/old.py"],
            ),
            id="several files and hunks",
        ),
    ],
)
def test_a_whole_recorded_diff_rebuilds_the_change_set(changes):
    diff = submission_diff(as_graded(TASK), changes)
    assert same_changes(change_set_from_diff(diff, TASK), changes)


def test_a_file_the_diff_shows_whole_keeps_the_task_bit_as_the_diff_cannot_show_a_new_one():
    changes = ChangeSet(written={"scripts/run.sh": b"#!/bin/sh\necho hi\n"}, executable=set())
    rebuilt = change_set_from_diff(submission_diff(as_graded(TASK), changes), TASK)
    assert rebuilt.written == changes.written and rebuilt.executable == {"scripts/run.sh"}


def test_a_diff_of_a_long_file_with_hunks_far_apart_rebuilds_it():
    old = "".join(f"line {n}\n" for n in range(200)).encode()
    new = old.replace(b"line 10\n", b"line ten\n").replace(b"line 150\n", b"").replace(b"line 199\n", b"end")
    task = full_tree({"long.py": old})
    changes = ChangeSet(written={"long.py": new})
    diff = submission_diff(task, changes)
    assert diff.count("@@ -") == 3
    assert change_set_from_diff(diff, task).written == {"long.py": new}


def test_an_empty_diff_is_an_empty_submission():
    assert same_changes(change_set_from_diff("", TASK), ChangeSet())


@pytest.mark.parametrize(
    ("task", "changes", "cap", "reason"),
    [
        pytest.param(
            TASK,
            ChangeSet(written={f"calc/m{n}.py": b"X = 1\n" * 50 for n in range(10)}),
            2000,
            "cut at its size cap",
            id="cut",
        ),
        pytest.param(TASK, ChangeSet(written={"calc/blob.py": b"\x00\x01"}), 10**6, "binary file", id="binary"),
        pytest.param(
            full_tree({"big.py": b"x = 1\n" * MAX_DIFF_LINES}),
            ChangeSet(written={"big.py": b"x = 2\n" * MAX_DIFF_LINES}),
            10**9,
            "too large to diff",
            id="too many lines",
        ),
        pytest.param(TASK, ChangeSet(written={"calc/latin.py": b"caf\xe9\n"}), 10**6, "not UTF-8", id="latin-1"),
    ],
)
def test_an_incomplete_diff_is_not_replayed_and_says_why(task, changes, cap, reason):
    diff = submission_diff(as_graded(task), changes, cap_chars=cap)
    with pytest.raises(NotReplayable, match=reason):
        change_set_from_diff(diff, task)


def test_a_diff_that_no_longer_fits_the_task_is_not_replayed():
    diff = submission_diff(TASK, ChangeSet(written={"calc/ops.py": CLAMP}))
    moved = full_tree({"calc/ops.py": OPS.replace(b"def clamp(value", b"def clamp(number")})
    with pytest.raises(NotReplayable, match="does not apply to the task's calc/ops.py"):
        change_set_from_diff(diff, moved)


def test_the_totals_count_lowered_raised_failed_and_skipped_episodes():
    report = RegradeReport()
    for result in (
        Regraded("forged", "t", 1.0, 0.0, "visible_tests", "checks", "change_set"),
        Regraded("honest", "t", 1.0, 1.0, "checks", "checks", "change_set"),
        Regraded("underpaid", "t", 0.0, 0.5, "checks", "checks", "diff"),
        Regraded("lost", "t", 1.0, None, "checks", None, "diff", "re-grading failed: engine gone"),
        Skipped("old", "t", "its recorded diff was cut at its size cap"),
    ):
        report.add(result)
    assert report.totals() == RegradeTotals(regraded=3, changed=2, lowered=1, raised=1, failed=1, skipped=1)
    assert [r.episode_id for r in report.episodes if r.changed] == ["forged", "underpaid"]


def test_episodes_played_on_the_in_memory_engine_are_graded_again_to_the_same_rewards(memory_runtime):
    """The whole path with no engine: played, stored, rebuilt from the stored change set, graded again."""
    from env_server.lifecycle.provisioning import seed
    from env_server.traces.regrade import Grading, regrade
    from proto.actions import ToolCall
    from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS, WRONG_OPS

    played = {}
    for source in (ORIGINAL_OPS, WRONG_OPS):
        episode = memory_runtime.start_episode(ResetOptions(task_id=DEMO_TASK_ID))
        memory_runtime.take_step(episode, ToolCall(tool="write_file", args={"path": "calc/ops.py", "content": source}))
        played[episode.id] = memory_runtime.take_step(episode, ToolCall(tool="submit")).reward
    grading = Grading(
        lambda task: seed(task, memory_runtime.backend.create(task.record.image)),
        memory_runtime.settings.grade_limits(),
    )
    report = regrade(memory_runtime.traces, memory_runtime.store, grading, list(played))
    assert sorted(played.values()) == [0.0, 1.0]
    assert {r.episode_id: r.new_reward for r in report.episodes} == played
    assert [r.source for r in report.episodes] == ["change_set", "change_set"]
    honest = next(episode_id for episode_id, reward in played.items() if reward == 1.0)
    # An episode recorded before change sets were kept is graded from its recorded diff.
    with closing(sqlite3.connect(memory_runtime.settings.trace_path())) as db, db:
        db.execute("DELETE FROM submissions WHERE episode_id = ?", (honest,))
    (again,) = regrade(memory_runtime.traces, memory_runtime.store, grading, [honest]).episodes
    assert (again.source, again.new_reward, again.changed) == ("diff", 1.0, False)
