"""From a deletion to a finished task's files: its workspace archive and solution patch, then, once validation has
checked them (validation/task_checks.py), its record.

A task is files on top of its repository's image: the scrubbed single-commit workspace as a gzipped tar, written into
a container of the repository image together with the editable install's files, exactly as the env server resets.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from proto import task_files
from proto.tasks import IoCheck, TaskRecord, TaskStats
from sandbox.lifecycle.base_image import regrow_version
from task_synth.candidates.deletion import Deletion
from task_synth.candidates.units import deleted_units
from task_synth.repository.editable_install import tree_archive
from task_synth.repository.prepared_repo import PreparedRepo
from task_synth.repository.repo_image import slug
from task_synth.store.problem_rewrite import rewrite_problem_statement
from task_synth.store.problem_statement import problem_statement
from task_synth.store.splits import split_of
from task_synth.store.workspace import build_workspace, solution_patch
from task_synth.task_evidence import CheckedTask, TaskEvidence

UNCHECKED_SPLIT = "eval"  # a --keep-unchecked run makes an evaluation store: its tasks are never a training split
# One time for every member (the workspace commit's date), so that the same deletion gives the same files and times.
ARCHIVE_MTIME = 946684800


@dataclass
class BuiltTask:
    """A task that passed every check with its workspace archive, or the reason it did not.

    `io_checks` go to the task store's hidden files only, never into the record.
    """

    record: TaskRecord | None
    rejection: str | None
    workspace: bytes | None
    test_executions: int
    detail: str = ""
    io_checks: list[IoCheck] = field(default_factory=list)
    # For no_evidence, the units no secret check can judge; for weak_checks, those whose checks kill too few mutants.
    unchecked: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TaskWorkspace:
    """What the agent starts from, as a gzipped tar of the scrubbed single-commit workspace, and the solution patch."""

    archive: bytes
    patch: str


def instance_id(context: PreparedRepo, deletion: Deletion) -> str:
    digest = hashlib.sha1(f"{context.checkout.commit}:{deletion.mode}:{deletion.unit.key}".encode()).hexdigest()[:8]
    unit = deletion.unit
    named = f"{unit.parts[0].qualname}_and_{len(unit.parts) - 1}_more" if unit.parts else unit.qualname
    name = re.sub(r"[^A-Za-z0-9_]+", "_", named)
    return f"{slug(context.checkout.repo_name)}__{deletion.mode}__{name}__{digest}"


def repo_dir(context: PreparedRepo) -> str:
    """The repository's folder in the task store (install archive and wheels), one per commit."""
    return task_files.repo_dir(slug(context.checkout.repo_name), context.checkout.commit)


def workspace_archive(workspace: Path) -> bytes:
    """The workspace folder as a reproducible gzipped tar under `workspace/`, owned by agent, for put_archive at /."""
    return gzip.compress(tree_archive(workspace, "workspace/", ARCHIVE_MTIME), mtime=0)


def task_workspace(context: PreparedRepo, deletion: Deletion) -> TaskWorkspace:
    """The deleted state as the agent's workspace archive, and the patch that restores the deleted code."""
    with (
        context.clock.stage("task: workspace archive"),
        tempfile.TemporaryDirectory(prefix="regrow-workspace-") as scratch,
    ):
        patch = solution_patch(deletion)
        archive = workspace_archive(build_workspace(context.checkout.root, deletion, Path(scratch) / "workspace"))
    return TaskWorkspace(archive, patch)


def build_task(context: PreparedRepo, deletion: Deletion, workspace: TaskWorkspace, checked: CheckedTask) -> BuiltTask:
    """The task of a checked deletion: its record and workspace, or the rejection its checks found."""
    evidence = checked.evidence
    if checked.rejection is not None or evidence is None:
        executions = checked.test_executions
        return BuiltTask(None, checked.rejection, None, executions, checked.detail, unchecked=checked.unchecked)
    record = task_record(context, deletion, workspace.patch, evidence)
    return BuiltTask(record, None, workspace.archive, checked.test_executions, io_checks=evidence.io_checks)


def task_record(context: PreparedRepo, deletion: Deletion, patch: str, evidence: TaskEvidence) -> TaskRecord:
    """The record of a task that passed every check, with its problem statement and its difficulty signals."""
    identifier = instance_id(context, deletion)
    unit = deletion.unit
    module_name = context.layout.modules[unit.path]
    statement = rewrite_problem_statement(
        problem_statement(deletion, module_name, evidence.fail_to_pass, context.layout.test_texts), context.settings
    )
    return TaskRecord(
        instance_id=identifier,
        repo=context.checkout.repo_name,
        source_commit=context.checkout.commit,
        image=context.repo_image,
        workspace_archive=task_files.workspace_archive(identifier),
        repo_dir=repo_dir(context),
        mode=deletion.mode,
        deleted=deleted_units(unit),
        problem_statement=statement,
        FAIL_TO_PASS=evidence.fail_to_pass,
        PASS_TO_PASS=evidence.pass_to_pass,
        test_command=context.settings.test_command,
        solution_patch=patch,
        test_files=list(context.layout.test_files),
        split=task_split(context, deletion),
        pytest_plugins=evidence.pytest_plugins,
        stats=task_stats(deletion, patch, statement, evidence),
        created_at=datetime.now(UTC),
        synth_version=regrow_version(),
    )


def task_split(context: PreparedRepo, deletion: Deletion) -> str:
    """A --keep-unchecked store's split (`eval` unless --split names one), else the one its repo or file falls in."""
    settings = context.settings
    if settings.keep_unchecked:
        return settings.split or UNCHECKED_SPLIT
    return split_of(
        context.checkout.repo_name,
        deletion.unit.path,
        fixed=settings.split,
        by=settings.split_by,
        test_fraction=settings.test_fraction,
    )


def task_stats(deletion: Deletion, patch: str, statement: str, evidence: TaskEvidence) -> TaskStats:
    """The task's difficulty signals: the deletion's size, its tests, its statement, its checks and their strength."""
    return TaskStats(
        lines_deleted=sum(1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")),
        covering_tests=evidence.covering_tests,
        complexity=deletion.unit.complexity,
        fail_to_pass=len(evidence.fail_to_pass),
        statement_chars=len(statement),
        baseline_s=evidence.baseline_s,
        hidden_checks=len(evidence.io_checks),
        mutants=evidence.mutants,
        mutants_equivalent=evidence.mutants_equivalent,
        mutant_kill_rate=evidence.mutant_kill_rate,
        unit_kill_rates=evidence.unit_kill_rates,
        mutation_s=evidence.mutation_s,
    )
