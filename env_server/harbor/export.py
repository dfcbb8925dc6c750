"""`regrow tasks export --format harbor --out DIR`: one Harbor task directory per task (harbor 0.26's layout).

DIR/<instance id>/instruction.md        the problem statement
                  task.toml             the verifier in a separate container, the agent's /workspace copied to it
                  environment/          FROM the task's repository image (local: no registry), its install and
                                        workspace added as they are in a reset
                  solution/solve.sh     applies the task's solution patch (Harbor's oracle agent runs it)
                  tests/test.sh         inside/grade.py: regrow's path policy, the checks replayed and judged,
                                        the pristine tests, the reward
                  tests/checks.json     the task's checks with the original's outcomes: never in environment/
                  tests/grader/         regrow's judging modules, shipped unchanged (wire models: stand-ins)
                  tests/programs/       regrow's check and test children, run apart from the verifier
DIR/README.md                           which of regrow's grading guarantees hold under Harbor, and which do not
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from env_server.grading.run import PROGRAMS
from env_server.grading.submission import CHECK_CALL_S
from env_server.settings import GradeLimits
from env_server.task_store import Task
from proto.task_files import RECORDS, hidden_dir, read_records
from proto.tasks import TaskRecord
from sandbox.layout import WORKSPACE

log = logging.getLogger(__name__)
INSIDE = Path(__file__).with_name("inside")
ROOT = Path(__file__).parents[2]
# regrow's judging as the server runs it, shipped unchanged into tests/grader/ with the packages they import from
SHIPPED_UNCHANGED = (
    "env_server/grading/checks.py",
    "env_server/grading/verdict.py",
    "env_server/grading/pytest_command.py",
    "env_server/grading/path_policy.py",
    "env_server/grading/inside/launcher.py",
    "proto/evidence.py",
    "proto/python_ast.py",
)
# proto's wire models are pydantic's, which a task image lacks: stand-ins take their place
GRADER = {
    **{path: ROOT / path for path in SHIPPED_UNCHANGED},
    "proto/tasks.py": INSIDE / "wire_standins.py",
    "proto/observations.py": INSIDE / "wire_standins.py",
}
PACKAGES = ("proto", "env_server", "env_server/grading", "env_server/grading/inside")
# The programs the verifier starts as the submission's uid: regrow's check and test children, and the plugin probe.
CHILD_PROGRAMS = {
    **{name: path for name, path in PROGRAMS.items() if name != "launcher.py"},
    "pytest_plugin_modules.py": ROOT / "env_server/grading/inside/pytest_plugin_modules.py",
}
AGENT_TIMEOUT_S = 1800.0
# Each of the verifier's two runs (the checks, then FAIL_TO_PASS and PASS_TO_PASS) gets the tests' own limit; the
# verifier's covers both, its container's start and slack.
TEST_TIMEOUT_S = 600
VERIFIER_TIMEOUT_S = 2 * TEST_TIMEOUT_S + 300.0


class HarborExportError(ValueError):
    """The store cannot be exported; the message says why and what to do."""


def _toml_value(value: object) -> str:
    """A TOML value of a str, bool, number or list of them (JSON's string escapes are TOML's basic strings')."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def task_toml(record: TaskRecord) -> str:
    stats = record.stats
    metadata = {
        "regrow_instance_id": record.instance_id,
        "repo": record.repo,
        "source_commit": record.source_commit,
        "split": record.split,
        "deletion_mode": record.mode,
        "deleted_units": [f"{unit.path}::{unit.qualname}" for unit in record.deleted],
        "lines_deleted": stats.lines_deleted,
        "fail_to_pass": len(record.FAIL_TO_PASS),
        "pass_to_pass": len(record.PASS_TO_PASS),
    }
    sections: dict[str, dict[str, object]] = {
        "task": {"name": f"regrow/{record.instance_id}", "description": f"regrow task from {record.repo}"},
        "metadata": metadata,
        "agent": {"timeout_sec": AGENT_TIMEOUT_S},
        # a fresh container of the task's image grades: nothing the agent ran or installed outside /workspace stays
        # root: the copied workspace is root's, and the verifier puts refused paths back before the tests run
        "verifier": {"timeout_sec": VERIFIER_TIMEOUT_S, "environment_mode": "separate", "user": "root"},
        "environment": {"build_timeout_sec": 600.0, "workdir": WORKSPACE},
    }
    lines = ['schema_version = "1.4"', f"artifacts = {_toml_value([WORKSPACE])}"]
    for name, table in sections.items():
        lines += ["", f"[{name}]", *(f"{key} = {_toml_value(value)}" for key, value in table.items())]
    return "\n".join(lines) + "\n"


def dockerfile(record: TaskRecord) -> str:
    lines = [f"FROM {record.image}"]
    if record.workspace_archive is not None:
        # what a reset writes into a container of the image: the editable install's files, then the workspace
        lines += ["ADD install.tar.gz /", "ADD workspace.tar.gz /"]
    return "\n".join([*lines, f"WORKDIR {WORKSPACE}", ""])


def _write_script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def _original_workspace(task: Task) -> bytes:
    """The task's starting workspace as a gzipped tar rooted at workspace/, for the verifier to compare against."""
    if task.as_files:
        return task.workspace_archive()
    raise HarborExportError(
        f"task {task.id} has its workspace inside its image ({task.record.image}), not as files in the store: "
        "synthesize the store again with this regrow, which stores every task as files"
    )


def write_task(task: Task, folder: Path) -> None:
    record = task.record
    workspace = _original_workspace(task)
    (folder / "instruction.md").parent.mkdir(parents=True, exist_ok=True)
    (folder / "instruction.md").write_text(
        record.problem_statement.rstrip() + f"\n\nThe repository is checked out at {WORKSPACE}.\n"
    )
    (folder / "task.toml").write_text(task_toml(record))
    environment = folder / "environment"
    environment.mkdir(parents=True, exist_ok=True)
    (environment / "Dockerfile").write_text(dockerfile(record))
    (environment / "workspace.tar.gz").write_bytes(workspace)
    (environment / "install.tar.gz").write_bytes(task.install_archive())
    (folder / "solution" / "solution.patch").parent.mkdir(parents=True, exist_ok=True)
    (folder / "solution" / "solution.patch").write_text(record.solution_patch)
    _write_script(
        folder / "solution" / "solve.sh", f"set -euo pipefail\ncd {WORKSPACE}\ngit apply /solution/solution.patch\n"
    )
    write_verifier(task, folder / "tests", workspace)


def write_verifier(task: Task, tests: Path, workspace: bytes) -> None:
    """The tests folder, which only the verifier's container sees: the verifier and what it ships of regrow, the
    checks with their expected outcomes, the original workspace, the pristine tests and the task's spec."""
    record = task.record
    # -I -S: the verifier imports nothing but the standard library and what ships beside it
    _write_script(tests / "test.sh", "exec python -I -S /tests/grade.py\n")
    shutil.copyfile(INSIDE / "grade.py", tests / "grade.py")
    for path, source in GRADER.items():
        (tests / "grader" / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tests / "grader" / path)
    for package in PACKAGES:
        (tests / "grader" / package / "__init__.py").write_text(
            '"""Shipped by the Harbor export: what the verifier imports."""\n'
        )
    (tests / "programs").mkdir()
    for name, source in CHILD_PROGRAMS.items():
        shutil.copyfile(source, tests / "programs" / name)
    checks = task.io_checks()
    if not checks:
        log.warning("task %s has no checks: its verifier gives 0 with basis undefined", task.id)
    (tests / "checks.json").write_text(json.dumps([check.model_dump() for check in checks], indent=1) + "\n")
    (tests / "workspace.tar.gz").write_bytes(workspace)
    for path, content in task.pristine_tests().items():
        (tests / "pristine" / path).parent.mkdir(parents=True, exist_ok=True)
        (tests / "pristine" / path).write_bytes(content)
    spec = {
        "FAIL_TO_PASS": record.FAIL_TO_PASS,
        "PASS_TO_PASS": record.PASS_TO_PASS,
        "test_command": record.test_command,
        "hash_seed": record.hash_seed,
        "pytest_plugins": record.pytest_plugins,
        "test_files": record.test_files,
        "deleted_paths": sorted({unit.path for unit in record.deleted}),
        "deleted_units": [{"path": u.path, "qualname": u.qualname, "kind": u.kind} for u in record.deleted],
        "reward_mode": GradeLimits().mode,
        "call_timeout_s": CHECK_CALL_S,
        "timeout_s": TEST_TIMEOUT_S,
    }
    (tests / "task.json").write_text(json.dumps(spec, indent=2) + "\n")


def export_harbor(store: Path, out: Path, force: bool = False) -> int:
    """Write one Harbor task directory per task of `store` under `out`, and the README; returns the count."""
    if not (store / RECORDS).is_file():
        raise HarborExportError(f"no task store at {store} ({RECORDS} is missing): make one with `regrow synth --out`")
    records = read_records(store)
    if not records:
        raise HarborExportError(f"{store / RECORDS} holds no tasks: run `regrow synth --out {store}` first")
    if out.exists():
        if not force:
            raise FileExistsError(f"{out} exists: give another --out, or --force to replace it")
        shutil.rmtree(out)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for record in records:
            write_task(Task(record, hidden_dir(store, record.instance_id), store), staging / record.instance_id)
        shutil.copyfile(INSIDE / "README.md", staging / "README.md")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # a failed export leaves nothing half-written
        raise
    staging.rename(out)
    log.info("exported %d tasks from %s to %s as Harbor task directories", len(records), store, out)
    return len(records)
