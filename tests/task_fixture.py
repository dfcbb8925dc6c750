"""A hand-made task store with one tiny task, stored as files the way `regrow synth` stores them.

`build_demo_task_store(backend, base_image, out_dir)` writes `out_dir/tasks.jsonl`, the workspace archive, the
repository's install archive and `out_dir/hidden/<id>/`; the repository image is built once per content hash.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from proto.tasks import DeletedUnit, IoCheck, TaskRecord, TaskStats

DEMO_TASK_ID = "demo__calc-clamp"
TWIN_TASK_ID = "demo__calc-clamp-twin"  # the demo task under a second id, for a store of two tasks
TEST_COMMAND = 'python -m pytest -p no:cacheprovider -o addopts=""'
WHEELS = ("pytest==8.3.5", "coverage==7.6.12", "setuptools==75.8.0", "wheel==0.45.1")
WHEELHOUSE = Path(__file__).resolve().parent.parent / ".cache" / "demo-task-wheels"

ORIGINAL_OPS = '''"""Small arithmetic helpers."""


def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b


def clamp(value, low, high):
    """Return value limited to the closed range [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    return max(low, min(value, high))
'''

DELETED_OPS = (
    ORIGINAL_OPS.split("def clamp")[0]
    + '''def clamp(value, low, high):
    """Return value limited to the closed range [low, high]."""
    raise NotImplementedError
'''
)

# A plausible wrong solution the reward tests pair with each cheat.
WRONG_OPS = DELETED_OPS.replace("    raise NotImplementedError\n", "    return value\n")

TESTS = """from calc.ops import add, clamp, mul, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(2, 3) == -1


def test_mul():
    assert mul(4, 3) == 12


def test_clamp_below():
    assert clamp(-5, 0, 10) == 0


def test_clamp_above():
    assert clamp(50, 0, 10) == 10


def test_clamp_rejects_empty_range():
    import pytest

    with pytest.raises(ValueError):
        clamp(1, 5, 0)
"""

CONFTEST = """import pytest


@pytest.fixture
def numbers():
    return [1, 2, 3]
"""

PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "calc"
version = "0.1.0"

[tool.setuptools]
packages = ["calc"]
"""

# The repository image: dependencies only, as `regrow synth` builds one; the task's files are written in at reset.
DOCKERFILE = """ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install -q --no-index --find-links /tmp/wheels pytest coverage setuptools wheel \\
 && rm -rf /tmp/wheels /root/.cache \\
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} + \\
 && chown -R 1000:1000 /opt/venv && install -d -o 1000 -g 1000 /workspace
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /workspace
USER agent
"""
REPO_DIR = "repos/demo-calc"

F2P = [
    "tests/test_ops.py::test_clamp_below",
    "tests/test_ops.py::test_clamp_above",
    "tests/test_ops.py::test_clamp_rejects_empty_range",
]
P2P = ["tests/test_ops.py::test_add", "tests/test_ops.py::test_sub", "tests/test_ops.py::test_mul"]
TEST_FILES = ["tests/test_ops.py", "tests/conftest.py"]
# The calls of clamp the F2P tests make, as synthesis records them for the grader's hidden checks.
IO_CHECKS = [
    IoCheck(module="calc.ops", qualname="clamp", args="(-5, 0, 10)", result="0", test=F2P[0]),
    IoCheck(module="calc.ops", qualname="clamp", args="(50, 0, 10)", result="10", test=F2P[1]),
    IoCheck(module="calc.ops", qualname="clamp", args="(1, 5, 0)", raises="ValueError", test=F2P[2]),
    # Calls no visible test makes: an answer table for the visible inputs fails them.
    IoCheck(module="calc.ops", qualname="clamp", args="(7, 0, 10)", result="7"),
    IoCheck(module="calc.ops", qualname="clamp", args="(-2.5, -1.0, 1.0)", result="-1.0"),
]


def workspace_files(ops_source: str = DELETED_OPS) -> dict[str, str]:
    """The repository as the agent sees it (the deleted state by default)."""
    return {
        "pyproject.toml": PYPROJECT,
        "calc/__init__.py": "",
        "calc/ops.py": ops_source,
        "tests/__init__.py": "",
        "tests/conftest.py": CONFTEST,
        "tests/test_ops.py": TESTS,
    }


def unified_patch(path: str, before: str, after: str) -> str:
    """A `git apply`-able patch of one file."""
    lines = difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


SOLUTION_PATCH = unified_patch("calc/ops.py", DELETED_OPS, ORIGINAL_OPS)


def _content_hash() -> str:
    digest = hashlib.sha256(DOCKERFILE.encode())
    for path, text in sorted(workspace_files().items()):
        digest.update(path.encode() + b"\0" + text.encode() + b"\0")
    digest.update(repr(WHEELS).encode())
    return digest.hexdigest()[:12]


def _wheelhouse() -> Path:
    """Wheels of pytest and friends, built once on the host (PyPI or pip's cache), in a folder of this process's own
    that is renamed into place: `make test`'s lanes may build it at once, and none may read the other's half."""
    if (WHEELHOUSE / ".complete").exists():
        return WHEELHOUSE
    WHEELHOUSE.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{WHEELHOUSE.name}.", dir=WHEELHOUSE.parent))
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(building), *WHEELS], check=True)
        (building / ".complete").touch()
        if not (WHEELHOUSE / ".complete").exists():
            shutil.rmtree(WHEELHOUSE, ignore_errors=True)  # an interrupted build of an older run
            building.rename(WHEELHOUSE)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return WHEELHOUSE


def build_demo_image(backend, base_image: str) -> str:
    """The repository image, tagged by content hash; built only when missing."""
    tag = f"regrow/demo-repo:{_content_hash()}"
    if backend.image_exists(tag):
        return tag
    wheels = _wheelhouse()
    with tempfile.TemporaryDirectory() as context:
        root = Path(context)
        (root / "Dockerfile").write_text(DOCKERFILE)
        subprocess.run(["cp", "-r", str(wheels), str(root / "wheels")], check=True)
        backend.client.images.build(
            path=context, tag=tag, buildargs={"BASE_IMAGE": base_image}, network_mode="none", rm=True
        )
    return tag


def _git_workspace(root: Path) -> Path:
    for path, text in workspace_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    from task_synth.store.workspace import GIT_ENV

    git = ["git", "-c", "init.templateDir=", "-C", str(root)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run(
        [*git, "commit", "-q", "--no-gpg-sign", "-m", "task"], check=True, env={"PATH": "/usr/bin:/bin", **GIT_ENV}
    )
    return root


def build_demo_archives(backend, image: str) -> tuple[bytes, bytes]:
    """(workspace archive, install archive) of the demo task, made as `regrow synth` makes them."""
    from task_synth.repository.editable_install import capture_install, install_workspace
    from task_synth.store.task_builder import workspace_archive

    with tempfile.TemporaryDirectory() as scratch:
        workspace = _git_workspace(Path(scratch) / "workspace")
        with backend.create(image, workdir="/workspace") as sb:
            install_workspace(sb, workspace, 300)
            install = capture_install(sb)
        return workspace_archive(workspace), install


def demo_record(image: str) -> TaskRecord:
    start = ORIGINAL_OPS.splitlines().index("def clamp(value, low, high):") + 1
    return TaskRecord(
        instance_id=DEMO_TASK_ID,
        repo="demo/calc",
        source_commit="0" * 40,
        image=image,
        workspace_archive=f"workspaces/{DEMO_TASK_ID}.tar.gz",
        repo_dir=REPO_DIR,
        mode="stub",
        deleted=[
            DeletedUnit(path="calc/ops.py", qualname="clamp", kind="function", start_line=start, end_line=start + 4)
        ],
        problem_statement="Implement `clamp(value, low, high)` in calc/ops.py: limit value to [low, high]; "
        "raise ValueError when low > high.",
        FAIL_TO_PASS=F2P,
        PASS_TO_PASS=P2P,
        test_command=TEST_COMMAND,
        solution_patch=SOLUTION_PATCH,
        test_files=TEST_FILES,
        split="train",
        stats=TaskStats(lines_deleted=3, covering_tests=3, complexity=2, hidden_checks=len(IO_CHECKS), baseline_s=1.0),
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        synth_version="hand-made",
    )


MEMORY_IMAGE = "memory/calc:demo"


def build_demo_task_store(backend, base_image: str, out_dir: Path) -> Path:
    """Write a one-task store to `out_dir` (image built or reused) and return `out_dir`."""
    image = build_demo_image(backend, base_image)
    return _write_demo_store(Path(out_dir), [demo_record(image)], *build_demo_archives(backend, image))


def build_memory_task_store(out_dir: Path, task_ids: tuple[str, ...] = (DEMO_TASK_ID,)) -> Path:
    """The same store for the in-memory backend: no image, and an install archive with nothing in it. With several
    `task_ids`, the demo task is stored under each: distinct tasks to the server, graded alike on this host."""
    from task_synth.store.task_builder import workspace_archive

    with tempfile.TemporaryDirectory() as scratch:
        workspace = workspace_archive(_git_workspace(Path(scratch) / "workspace"))
    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w:gz"):
        pass
    demo = demo_record(MEMORY_IMAGE)
    records = [
        demo.model_copy(update={"instance_id": task_id, "workspace_archive": f"workspaces/{task_id}.tar.gz"})
        for task_id in task_ids
    ]
    return _write_demo_store(Path(out_dir), records, workspace, empty.getvalue())


def _write_demo_store(out_dir: Path, records: list[TaskRecord], workspace: bytes, install: bytes) -> Path:
    (out_dir / "workspaces").mkdir(parents=True, exist_ok=True)
    (out_dir / REPO_DIR).mkdir(parents=True, exist_ok=True)
    (out_dir / REPO_DIR / "install.tar.gz").write_bytes(install)
    (out_dir / "tasks.jsonl").write_text("".join(record.model_dump_json() + "\n" for record in records))
    files = workspace_files(ORIGINAL_OPS)
    for record in records:
        (out_dir / record.workspace_archive).write_bytes(workspace)
        hidden = out_dir / "hidden" / record.instance_id
        for path in record.test_files:
            (hidden / "tests" / path).parent.mkdir(parents=True, exist_ok=True)
            (hidden / "tests" / path).write_text(files[path])
        (hidden / "solution.patch").write_text(record.solution_patch)
        (hidden / "io_checks.json").write_text(json.dumps([check.model_dump() for check in IO_CHECKS]))
    return out_dir


if __name__ == "__main__":  # build by hand: python -m tests.task_fixture OUT_DIR
    from sandbox import DockerBackend
    from sandbox.lifecycle.base_image import BASE_IMAGE

    print(json.dumps(str(build_demo_task_store(DockerBackend(), BASE_IMAGE, Path(sys.argv[1])))))
