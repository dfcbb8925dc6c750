"""Tasks stored as files: the store checks their files, groups them by repository for pooling (no Docker)."""

import json
from datetime import UTC, datetime

import pytest

from env_server.task_store import TaskStore
from proto.tasks import TaskRecord, TaskStats
from regrow.bench.serving import widened_store


def _record(identifier: str, image="regrow/repo-x:1", repo_dir="repos/x-1", as_files=True) -> TaskRecord:
    return TaskRecord(
        instance_id=identifier,
        repo="x",
        source_commit="c" * 40,
        image=image,
        mode="stub",
        deleted=[],
        workspace_archive=f"workspaces/{identifier}.tar.gz" if as_files else None,
        repo_dir=repo_dir if as_files else None,
        problem_statement="p",
        FAIL_TO_PASS=["t"],
        PASS_TO_PASS=["u"],
        test_command="pytest",
        solution_patch="diff",
        stats=TaskStats(lines_deleted=1, covering_tests=1, complexity=1),
        created_at=datetime.now(UTC),
        synth_version="0",
    )


def _store(root, records):
    (root / "workspaces").mkdir(parents=True, exist_ok=True)
    for record in records:
        (root / "hidden" / record.instance_id).mkdir(parents=True)
        (root / "hidden" / record.instance_id / "io_checks.json").write_text(json.dumps([]))
        if record.workspace_archive:
            (root / record.workspace_archive).write_bytes(record.instance_id.encode())
            (root / record.repo_dir).mkdir(parents=True, exist_ok=True)
            (root / record.repo_dir / "install.tar.gz").write_bytes(b"install")
    (root / "tasks.jsonl").write_text("".join(record.model_dump_json() + "\n" for record in records))
    return root


def test_tasks_of_one_repository_share_one_pool_and_image_tasks_keep_their_own(tmp_path):
    records = [
        _record("a"),
        _record("b"),
        _record("c", repo_dir="repos/x-2"),
        _record("d", image="regrow/task:d", as_files=False),
    ]
    store = TaskStore(_store(tmp_path, records))
    keys = store.pool_keys()
    assert sorted(keys) == ["regrow/repo-x:1 repos/x-1", "regrow/repo-x:1 repos/x-2", "regrow/task:d"]
    assert [task.id for task in keys["regrow/repo-x:1 repos/x-1"]] == ["a", "b"]
    assert store.get("b").workspace_archive() == b"b" and store.get("b").install_archive() == b"install"
    assert store.missing_images(lambda tag: tag != "regrow/task:d") == ["regrow/task:d"]


def test_a_store_missing_a_task_file_is_refused_at_load_with_the_remedy(tmp_path):
    root = _store(tmp_path, [_record("a")])
    (root / "workspaces" / "a.tar.gz").unlink()
    with pytest.raises(FileNotFoundError, match="a.tar.gz is missing; copy the whole task store"):
        TaskStore(root)


def test_the_bench_widens_a_store_with_linked_copies_under_new_ids(tmp_path):
    source = _store(tmp_path / "src", [_record("a"), _record("b")])
    assert widened_store(source, tmp_path / "wide", 7) == 2
    wide = TaskStore(tmp_path / "wide")
    assert len(wide.tasks) == 7 and len(wide.pool_keys()) == 1
    assert wide.get("a__copy2").workspace_archive() == b"a" and wide.get("b__copy3").workspace_archive() == b"b"


def test_the_bench_widens_a_store_that_has_twins_with_their_archives(tmp_path):
    """Before, only the tasks' own archives were linked: a store synthesized with twins (the default) failed to load
    in `regrow bench server` with "twin's archive is missing"."""
    source = _store(tmp_path / "src", [_record("a"), _record("t")])
    tasks = (source / "tasks.jsonl").read_text().splitlines(keepends=True)
    (source / "tasks.jsonl").write_text(tasks[0])
    (source / "twins.jsonl").write_text(tasks[1])
    assert widened_store(source, tmp_path / "wide", 3) == 1
    wide = TaskStore(tmp_path / "wide")
    assert sorted(wide.tasks) == ["a", "a__copy1", "a__copy2"] and wide.get("t").workspace_archive() == b"t"


def _tree(archive: bytes) -> dict[str, tuple]:
    import gzip
    import io
    import tarfile

    raw = gzip.decompress(archive) if archive[:2] == b"\x1f\x8b" else archive
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return {m.name: (m.type, m.mode, m.uid, tar.extractfile(m).read() if m.isfile() else None) for m in tar}


def test_workspace_layers_split_what_every_task_shares_from_each_tasks_rest(tmp_path):
    import subprocess

    from env_server.lifecycle.workspace_layers import WorkspaceLayers
    from task_synth.store.task_builder import workspace_archive

    archives = {}
    for name, ops in (("a", "def f():\n    raise NotImplementedError\n"), ("b", "def f():\n    return 1\n")):
        root = tmp_path / name
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "ops.py").write_text(ops)
        (root / "pkg" / "shared.py").write_text("x = 1\n")
        if name == "b":
            (root / "pkg" / "gone.py").write_text("y = 2\n")  # a task that kept what another deleted
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
        subprocess.run(
            ["git", "-C", str(root), "-c", "user.name=r", "-c", "user.email=r@x", "commit", "-qm", "t"], check=True
        )
        archives[name] = workspace_archive(root)
    archives["c"] = archives["b"]  # b's version of ops.py is now the most common one
    layers = WorkspaceLayers.of(archives.values())
    base = _tree(layers.base)
    assert "workspace/pkg/shared.py" in base and "workspace/pkg/gone.py" not in base  # a's workspace has no gone.py
    assert base["workspace/pkg/ops.py"] == _tree(archives["b"])["workspace/pkg/ops.py"]
    git_in_base = {name for name in base if "/.git/" in name}
    for name, archive in archives.items():
        tree = _tree(archive)
        assert all(base[path] == tree[path] for path in git_in_base)  # .git: only what every task holds alike
        rest = _tree(layers.rest(name, archive))
        assert "workspace/pkg/shared.py" not in rest
        assert ("workspace/pkg/ops.py" in rest) == (name == "a")
        assert {**base, **rest} == tree  # base then rest rebuild the task's workspace exactly
