"""The last checks of a task, on its finished workspace and solution: nothing of the deleted code leaks into what the
agent gets (the canary scan), the solution passes the task's tests in a fresh sandbox (the oracle), and the hidden
checks recorded there can grade every deleted unit (evidence, mutants and strength).

The store assembles the workspace archive and the solution patch before these checks (store/task_builder.py's
`task_workspace`) and the record after them, from the `CheckedTask` they return (`build_task`).
"""

from __future__ import annotations

import itertools
import logging
import time

from proto.tasks import UnitKillRate
from sandbox import Sandbox
from sandbox.layout import WORKSPACE
from task_synth.candidates.deletion import Deletion
from task_synth.repository.editable_install import SCRATCH, seed_workspace
from task_synth.repository.prepared_repo import SANDBOX_LIMITS
from task_synth.repository.repo_image import SYNTH_LABEL
from task_synth.task_evidence import CheckedTask, TaskEvidence
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
from task_synth.validation.repo_context import RepoContext
from task_synth.validation.suite_runs import SuiteRun, run_tests
from task_synth.validation.verdict import Verdict

log = logging.getLogger(__name__)
# The workspace must be one commit on one branch, with nothing outside it.
WORKSPACE_INVARIANTS = (
    'test "$(git rev-list --all --count)" = 1 && test -z "$(git remote)" '
    '&& test "$(git for-each-ref | wc -l)" = 1 && test -z "$(git status --porcelain --ignored)"'
)


def check_task(context: RepoContext, deletion: Deletion, verdict: Verdict, archive: bytes, patch: str) -> CheckedTask:
    """Scan the task's workspace `archive` for leaks, then oracle-check its solution `patch` and record its checks."""
    with context.clock.stage("task: leak scan"):
        canaries, hits = check_leaks(context, deletion, archive)
    if hits:
        detail = ", ".join(f"{hit.path}: {hit.canary}" for hit in hits[:3])
        log.info("%s leaks: %s", deletion.unit.key, detail)
        return CheckedTask("leak", 0, detail)
    if not canaries:
        # Nothing marks the deleted code apart from the rest of the image, so no scan could see it leak.
        return CheckedTask("unscannable", 0, "every name and literal of the deleted code is found elsewhere")
    return oracle_check(context, archive, deletion, patch, verdict)


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


def oracle_check(context: RepoContext, archive: bytes, deletion: Deletion, patch: str, verdict: Verdict) -> CheckedTask:
    """Apply the solution in a fresh task sandbox, run F2P + P2P, then record I/O checks and list the pytest plugins."""
    with context.clock.stage("task: oracle container"):
        sb = context.backend.create(
            context.repo_image, limits=SANDBOX_LIMITS, labels={SYNTH_LABEL: "oracle"}, workdir=WORKSPACE
        )
    with sb:
        refused = solution_refused(sb, context, archive, patch)
        if refused is not None:
            return refused
        return solution_checked(sb, context, deletion, verdict)


def solution_refused(sb: Sandbox, context: RepoContext, archive: bytes, patch: str) -> CheckedTask | None:
    """Write the task's workspace into `sb` and apply its solution there; the rejection when the workspace is not one
    clean commit or the patch does not apply, else None."""
    seed_workspace(sb, context.install_archive, archive)
    invariants = sb.exec(WORKSPACE_INVARIANTS, timeout=60, cwd=WORKSPACE)
    if invariants.exit_code != 0:
        return CheckedTask("leak", 0, "the workspace is not one clean commit: " + invariants.stderr.strip()[-200:])
    sb.write_file(f"{SCRATCH}/solution.patch", patch)
    applied = sb.exec(f"git apply {SCRATCH}/solution.patch", timeout=60, cwd=WORKSPACE)
    if applied.exit_code != 0:
        log.info("solution patch does not apply to %s: %s", context.repo_image, applied.stderr.strip())
        return CheckedTask("oracle_failed", 0, f"the solution patch does not apply: {applied.stderr.strip()[-200:]}")
    return None


def solution_checked(sb: Sandbox, context: RepoContext, deletion: Deletion, verdict: Verdict) -> CheckedTask:
    """Run F2P + P2P with the solution applied in `sb`; where they pass, record the hidden checks there and judge
    whether they can grade every unit."""
    tests = verdict.fail_to_pass + verdict.pass_to_pass
    settings = context.settings
    started = time.monotonic()
    with context.clock.stage("task: oracle tests"):
        run = run_tests(sb, settings.test_command, tests, settings.test_timeout_s)
    baseline_s = round(time.monotonic() - started, 3)
    if run.timed_out:
        return CheckedTask("timeout", run.executions, f"the tests ran past {settings.test_timeout_s:g}s")
    failed = run.failed(tests)
    if failed:
        detail = oracle_failure(run, failed)
        log.info("oracle: %s", detail)
        return CheckedTask("oracle_failed", run.executions, detail)
    with context.clock.stage("task: I/O recording"):
        # Tests a trivial stand-in passes still show the unit's real calls: seeds for unseen calls of their own.
        shown = list(dict.fromkeys(verdict.fail_to_pass + verdict.trivially_passed))
        recording = record_io_checks(sb, deletion, context.layout, shown, settings, tests_s=baseline_s)
        plugins = pytest_plugin_modules(sb)
    executions = run.executions + recording.test_executions
    rejection = evidence_rejection(recording, settings.min_kill_rate, settings.keep_unchecked)
    if rejection is not None:
        log.info("%s: %s", *rejection)
        unchecked = rejected_units(recording, rejection[0], settings.min_kill_rate)
        return CheckedTask(rejection[0], executions, rejection[1], unchecked)
    evidence = kept_evidence(context, deletion, verdict, recording, plugins, baseline_s)
    return CheckedTask(None, executions, evidence=evidence)


def kept_evidence(
    context: RepoContext,
    deletion: Deletion,
    verdict: Verdict,
    recording: Recording,
    plugins: list[str] | None,
    baseline_s: float,
) -> TaskEvidence:
    """What the record of a task that passed every check carries: its tests, its checks and their strength."""
    strength = recording.strength
    strengths = recording.units.strengths if recording.units else {}
    return TaskEvidence(
        fail_to_pass=verdict.fail_to_pass,
        pass_to_pass=verdict.pass_to_pass,
        covering_tests=len(context.baseline.covering(deletion.unit)),
        io_checks=recording.checks,
        pytest_plugins=plugins,
        baseline_s=baseline_s,
        unit_kill_rates=[UnitKillRate(unit=key, kill_rate=s.kill_rate if s else None) for key, s in strengths.items()],
        mutants=strength.mutants if strength else 0,
        mutants_equivalent=strength.equivalent if strength else 0,
        mutant_kill_rate=strength.kill_rate if strength else None,
        mutation_s=strength.seconds if strength else 0.0,
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
