"""From a validated deletion to a finished task: workspace archive, canary scan, oracle check, record.

A task is files on top of its repository's image: the scrubbed single-commit workspace as a gzipped tar, written into
a container of the repository image together with the editable install's files, exactly as the env server resets.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import logging
import re
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from proto import task_files
from proto.tasks import IoCheck, TaskRecord, TaskStats, UnitKillRate
from sandbox.layout import WORKSPACE
from sandbox.lifecycle.base_image import regrow_version
from task_synth.candidates.deletion import Deletion
from task_synth.repository.editable_install import SCRATCH, seed_workspace, tree_archive
from task_synth.repository.repo_image import SYNTH_LABEL, slug
from task_synth.store.problem_rewrite import rewrite_problem_statement
from task_synth.store.problem_statement import problem_statement
from task_synth.store.splits import split_of
from task_synth.store.workspace import build_workspace, solution_patch
from task_synth.validation.baseline import suite_error
from task_synth.validation.canary_scan import (
    Canaries,
    Hit,
    archive_files,
    canaries_for,
    is_vendored,
    scan_files,
    vendored_copy,
)
from task_synth.validation.io_recording import Recording, pytest_plugin_modules, record_io_checks
from task_synth.validation.repo_context import SANDBOX_LIMITS, RepoContext
from task_synth.validation.suite_runs import SuiteRun, run_tests
from task_synth.validation.task_strength import Strength
from task_synth.validation.unit_checks import deleted_units
from task_synth.validation.verdict import Verdict

log = logging.getLogger(__name__)
# The workspace must be one commit on one branch, with nothing outside it.
WORKSPACE_INVARIANTS = (
    'test "$(git rev-list --all --count)" = 1 && test -z "$(git remote)" '
    '&& test "$(git for-each-ref | wc -l)" = 1 && test -z "$(git status --porcelain --ignored)"'
)


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


@dataclass
class OracleRun:
    """What the oracle sandbox found: a rejection or None, test executions, and what it recorded for the grader."""

    rejection: str | None
    test_executions: int
    io_checks: list[IoCheck] = field(default_factory=list)
    pytest_plugins: list[str] | None = None
    detail: str = ""
    baseline_s: float | None = None  # how long F2P + P2P took with the solution: the grader's time limit follows it
    strength: Strength | None = None
    unit_rates: list[UnitKillRate] = field(default_factory=list)  # each unit's kill rate by its own checks
    unchecked: list[str] = field(default_factory=list)  # the units no secret check can judge (path::qualname)


def instance_id(context: RepoContext, deletion: Deletion) -> str:
    digest = hashlib.sha1(f"{context.checkout.commit}:{deletion.mode}:{deletion.unit.key}".encode()).hexdigest()[:8]
    unit = deletion.unit
    named = f"{unit.parts[0].qualname}_and_{len(unit.parts) - 1}_more" if unit.parts else unit.qualname
    name = re.sub(r"[^A-Za-z0-9_]+", "_", named)
    return f"{slug(context.checkout.repo_name)}__{deletion.mode}__{name}__{digest}"


def repo_dir(context: RepoContext) -> str:
    """The repository's folder in the task store (install archive and wheels), one per commit."""
    return task_files.repo_dir(slug(context.checkout.repo_name), context.checkout.commit)


def workspace_archive(workspace: Path) -> bytes:
    """The workspace folder as a reproducible gzipped tar under `workspace/`, owned by agent, for put_archive at /."""
    return gzip.compress(tree_archive(workspace, "workspace/", ARCHIVE_MTIME), mtime=0)


def workspace_text(archive: bytes) -> bytes:
    return b"\n".join(data for path, data in archive_files(archive) if "/.git/" not in f"/{path}")


def removed_source(deletion: Deletion) -> str:
    """The lines of the original files that the deleted state no longer has."""
    kept = {line for text in deletion.changed.values() if text for line in text.splitlines()}
    return "\n".join(line for text in deletion.original.values() for line in text.splitlines() if line not in kept)


def check_leaks(context: RepoContext, deletion: Deletion, archive: bytes) -> tuple[Canaries, list[Hit]]:
    """The canaries, and their hits (or caches, installed copies) in the task's workspace and the install's files.

    The repository image itself was read once: no canary is a token of it, and a deletion whose lines it mostly
    holds (a vendored copy, a wheel) is a leak here.
    """
    found, total = vendored_copy(removed_source(deletion), context.image_index)
    if is_vendored(found, total):
        return Canaries(frozenset(), frozenset()), [
            Hit(context.repo_image, f"copy of {found} of {total} deleted lines")
        ]
    index = context.image_index
    canaries = canaries_for(deletion, workspace_text(archive), index.tokens, index.lines, index.sorted_tokens)
    log.debug(
        "%s canaries: %s %s %s",
        deletion.unit.key,
        sorted(canaries.identifiers),
        sorted(canaries.literals),
        sorted(canaries.lines),
    )
    files = itertools.chain(archive_files(archive), archive_files(context.install_archive))
    return canaries, scan_files(files, canaries, set(context.layout.test_files), context.baseline.packages)


def oracle_failure(run: SuiteRun, failed: set[str]) -> str:
    """Why the solution's run failed: the failing tests, or, where pytest wrote no report, how it stopped (a run that
    died before its report would otherwise read as every test failing)."""
    if not run.rounds:
        return f"pytest stopped before reporting any test with the solution ({suite_error(run)})"
    last = (run.output_tail.strip().splitlines() or ["no output"])[-1]
    return f"{len(failed)} tests fail with the solution, e.g. {sorted(failed)[0]} ({last})"


def oracle_check(context: RepoContext, archive: bytes, deletion: Deletion, patch: str, verdict: Verdict) -> OracleRun:
    """Apply the solution in a fresh task sandbox, run F2P + P2P, then record I/O checks and list the pytest plugins."""
    tests = verdict.fail_to_pass + verdict.pass_to_pass
    image, clock = context.repo_image, context.clock
    with clock.stage("task: oracle container"):
        sb = context.backend.create(image, limits=SANDBOX_LIMITS, labels={SYNTH_LABEL: "oracle"}, workdir=WORKSPACE)
    with sb:
        seed_workspace(sb, context.install_archive, archive)
        invariants = sb.exec(WORKSPACE_INVARIANTS, timeout=60, cwd=WORKSPACE)
        if invariants.exit_code != 0:
            return OracleRun(
                "leak", 0, detail="the workspace is not one clean commit: " + invariants.stderr.strip()[-200:]
            )
        sb.write_file(f"{SCRATCH}/solution.patch", patch)
        applied = sb.exec(f"git apply {SCRATCH}/solution.patch", timeout=60, cwd=WORKSPACE)
        if applied.exit_code != 0:
            log.info("solution patch does not apply to %s: %s", image, applied.stderr.strip())
            return OracleRun(
                "oracle_failed", 0, detail=f"the solution patch does not apply: {applied.stderr.strip()[-200:]}"
            )
        started = time.monotonic()
        with clock.stage("task: oracle tests"):
            run = run_tests(sb, context.settings.test_command, tests, context.settings.test_timeout_s)
        baseline_s = round(time.monotonic() - started, 3)
        if run.timed_out:
            return OracleRun(
                "timeout", run.executions, detail=f"the tests ran past {context.settings.test_timeout_s:g}s"
            )
        failed = run.failed(tests)
        if failed:
            detail = oracle_failure(run, failed)
            log.info("oracle: %s", detail)
            return OracleRun("oracle_failed", run.executions, detail=detail)
        with clock.stage("task: I/O recording"):
            # Tests a trivial stand-in passes still show the unit's real calls: seeds for unseen calls of their own.
            shown = list(dict.fromkeys(verdict.fail_to_pass + verdict.trivially_passed))
            recording = record_io_checks(sb, deletion, context.layout, shown, context.settings, tests_s=baseline_s)
            plugins = pytest_plugin_modules(sb)
        executions = run.executions + recording.test_executions
        strength = recording.strength
        rejection = evidence_rejection(recording, context.settings.min_kill_rate, context.settings.keep_unchecked)
        if rejection is not None:
            log.info("%s: %s", *rejection)
            unchecked = rejected_units(recording, rejection[0], context.settings.min_kill_rate)
            return OracleRun(rejection[0], executions, detail=rejection[1], strength=strength, unchecked=unchecked)
        strengths = recording.units.strengths if recording.units else {}
        unit_rates = [UnitKillRate(unit=key, kill_rate=s.kill_rate if s else None) for key, s in strengths.items()]
        return OracleRun(
            None, executions, recording.checks, plugins, baseline_s=baseline_s, strength=strength, unit_rates=unit_rates
        )


def evidence_rejection(recording: Recording, min_kill_rate: float, keep_unchecked: bool) -> tuple[str, str] | None:
    """Why the recorded checks cannot grade the task, unit by unit: a unit with no secret evidence (unless
    `keep_unchecked`, for evaluation stores), or one whose own checks kill too few of its mutants; None when each
    unit's can."""
    units = recording.units
    if units is None:
        return None if keep_unchecked else ("no_evidence", "no call of the deleted code could be recorded")
    if units.without_evidence and not keep_unchecked:
        return "no_evidence", "no secret checks that one behaviour cannot pass for " + ", ".join(units.without_evidence)
    weakest = units.weakest()
    if weakest is not None and (weakest[1].kill_rate or 0.0) < min_kill_rate:
        key, strength = weakest
        detail = (
            f"the checks of {key} kill {strength.killed} of {strength.mutants - strength.equivalent} of its "
            f"mutants ({strength.kill_rate:.0%} < {min_kill_rate:.0%})"
        )
        return "weak_checks", detail
    return None


def rejected_units(recording: Recording, reason: str, min_kill_rate: float) -> list[str]:
    """The units behind an evidence rejection, which a group is tried again without: those with no secret evidence
    for `no_evidence`, those whose checks kill too few mutants for `weak_checks`."""
    units = recording.units
    if units is None:
        return []
    return units.without_evidence if reason == "no_evidence" else units.weak(min_kill_rate)


def build_task(context: RepoContext, deletion: Deletion, verdict: Verdict) -> BuiltTask:
    """Archive, scan and oracle-check one task."""
    identifier = instance_id(context, deletion)
    clock = context.clock
    with clock.stage("task: workspace archive"), tempfile.TemporaryDirectory(prefix="regrow-workspace-") as scratch:
        patch = solution_patch(deletion)
        archive = workspace_archive(build_workspace(context.checkout.root, deletion, Path(scratch) / "workspace"))
    with clock.stage("task: leak scan"):
        canaries, hits = check_leaks(context, deletion, archive)
    if hits:
        detail = ", ".join(f"{hit.path}: {hit.canary}" for hit in hits[:3])
        log.info("%s leaks: %s", identifier, detail)
        return BuiltTask(None, "leak", None, 0, detail)
    if not canaries:
        # Nothing marks the deleted code apart from the rest of the image, so no scan could see it leak.
        return BuiltTask(None, "unscannable", None, 0, "every name and literal of the deleted code is found elsewhere")
    oracle = oracle_check(context, archive, deletion, patch, verdict)
    if oracle.rejection:
        executions = oracle.test_executions
        return BuiltTask(None, oracle.rejection, None, executions, oracle.detail, unchecked=oracle.unchecked)
    unit = deletion.unit
    deleted = deleted_units(unit)
    module_name = context.layout.modules[unit.path]
    statement = rewrite_problem_statement(
        problem_statement(deletion, module_name, verdict.fail_to_pass, context.baseline.test_texts), context.settings
    )
    record = TaskRecord(
        instance_id=identifier,
        repo=context.checkout.repo_name,
        source_commit=context.checkout.commit,
        image=context.repo_image,
        workspace_archive=task_files.workspace_archive(identifier),
        repo_dir=repo_dir(context),
        mode=deletion.mode,
        deleted=deleted,
        problem_statement=statement,
        FAIL_TO_PASS=verdict.fail_to_pass,
        PASS_TO_PASS=verdict.pass_to_pass,
        test_command=context.settings.test_command,
        solution_patch=patch,
        test_files=list(context.layout.test_files),
        split=(context.settings.split or UNCHECKED_SPLIT)
        if context.settings.keep_unchecked
        else split_of(
            context.checkout.repo_name,
            unit.path,
            fixed=context.settings.split,
            by=context.settings.split_by,
            test_fraction=context.settings.test_fraction,
        ),
        pytest_plugins=oracle.pytest_plugins,
        stats=TaskStats(
            lines_deleted=sum(1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")),
            covering_tests=len(context.baseline.covering(unit)),
            complexity=unit.complexity,
            fail_to_pass=len(verdict.fail_to_pass),
            statement_chars=len(statement),
            baseline_s=oracle.baseline_s,
            hidden_checks=len(oracle.io_checks),
            mutants=oracle.strength.mutants if oracle.strength else 0,
            mutants_equivalent=oracle.strength.equivalent if oracle.strength else 0,
            mutant_kill_rate=oracle.strength.kill_rate if oracle.strength else None,
            unit_kill_rates=oracle.unit_rates,
            mutation_s=oracle.strength.seconds if oracle.strength else 0.0,
        ),
        created_at=datetime.now(UTC),
        synth_version=regrow_version(),
    )
    return BuiltTask(record, None, archive, oracle.test_executions, io_checks=oracle.io_checks)
