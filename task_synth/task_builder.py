"""From a validated deletion to a finished task: workspace, thin image, canary scan, oracle check, record."""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from proto.tasks import DeletedUnit, IoCheck, TaskRecord, TaskStats
from sandbox.base_image import regrow_version
from task_synth.canary_scan import Hit, canaries_for, scan_image
from task_synth.deletion import Deletion
from task_synth.io_recording import pytest_plugin_modules, record_io_checks
from task_synth.problem_rewrite import rewrite_problem_statement
from task_synth.problem_statement import problem_statement
from task_synth.repo_context import SANDBOX_LIMITS, RepoContext
from task_synth.repo_image import SYNTH_LABEL, build_task_image, slug
from task_synth.test_runs import SCRATCH, run_tests
from task_synth.validation import Verdict
from task_synth.workspace import build_workspace, solution_patch

log = logging.getLogger(__name__)
# The workspace must be one commit on one branch, with nothing outside it.
WORKSPACE_INVARIANTS = (
    'test "$(git rev-list --all --count)" = 1 && test -z "$(git remote)" '
    '&& test "$(git for-each-ref | wc -l)" = 1 && test -z "$(git status --porcelain --ignored)"'
)


@dataclass
class BuiltTask:
    """A task that passed every check, or the reason it did not; `image` is set when an image exists.

    `io_checks` go to the task store's hidden files only, never into the record.
    """

    record: TaskRecord | None
    rejection: str | None
    image: str | None
    test_executions: int
    detail: str = ""
    io_checks: list[IoCheck] = field(default_factory=list)


@dataclass
class OracleRun:
    """What the oracle sandbox found: a rejection or None, test executions, and what it recorded for the grader."""

    rejection: str | None
    test_executions: int
    io_checks: list[IoCheck] = field(default_factory=list)
    pytest_plugins: list[str] | None = None


def instance_id(context: RepoContext, deletion: Deletion) -> str:
    digest = hashlib.sha1(f"{context.checkout.commit}:{deletion.mode}:{deletion.unit.key}".encode()).hexdigest()[:8]
    name = re.sub(r"[^A-Za-z0-9_]+", "_", deletion.unit.qualname)
    return f"{slug(context.checkout.repo_name)}__{deletion.mode}__{name}__{digest}"


def task_image_tag(identifier: str) -> str:
    repo, _, rest = identifier.partition("__")
    return f"regrow/task-{repo}:{rest.replace('__', '-')}"[:128]


def workspace_text(workspace: Path) -> bytes:
    return b"\n".join(path.read_bytes() for path in sorted(workspace.rglob("*")) if path.is_file() and ".git" not in path.parts)


def check_leaks(context: RepoContext, image: str, deletion: Deletion, workspace: Path) -> list[Hit]:
    """Canary hits, caches or installed copies in the task image; empty means leak-free."""
    canaries = canaries_for(deletion, workspace_text(workspace), context.repo_image_tokens)
    log.debug("%s canaries: %s %s", image, sorted(canaries.identifiers), sorted(canaries.literals))
    return scan_image(context.backend, image, canaries, set(context.layout.test_files), context.baseline.packages)


def oracle_check(context: RepoContext, image: str, deletion: Deletion, patch: str, verdict: Verdict) -> OracleRun:
    """Apply the solution in a fresh task sandbox, run F2P + P2P, then record I/O checks and list the pytest plugins."""
    tests = verdict.fail_to_pass + verdict.pass_to_pass
    with context.backend.create(image, limits=SANDBOX_LIMITS, labels={SYNTH_LABEL: "oracle"}, workdir="/workspace") as sb:
        invariants = sb.exec(WORKSPACE_INVARIANTS, timeout=60, cwd="/workspace")
        if invariants.exit_code != 0:
            return OracleRun("leak", 0)
        sb.write_file(f"{SCRATCH}/solution.patch", patch)
        applied = sb.exec(f"git apply {SCRATCH}/solution.patch", timeout=60, cwd="/workspace")
        if applied.exit_code != 0:
            log.info("solution patch does not apply to %s: %s", image, applied.stderr.strip())
            return OracleRun("oracle_failed", 0)
        run = run_tests(sb, context.settings.test_command, tests, context.settings.test_timeout_s)
        if run.timed_out:
            return OracleRun("timeout", run.executions)
        failed = run.failed(tests)
        if failed:
            log.info("oracle: %d tests fail with the solution in %s, e.g. %s", len(failed), image, sorted(failed)[0])
            return OracleRun("oracle_failed", run.executions)
        recording = record_io_checks(sb, deletion, context.layout, verdict.fail_to_pass, context.settings)
        return OracleRun(None, run.executions + recording.test_executions, recording.checks, pytest_plugin_modules(sb))


def build_task(context: RepoContext, deletion: Deletion, verdict: Verdict, created_images: list[str]) -> BuiltTask:
    """Build, scan and oracle-check one task; its tag goes into `created_images` before the build starts."""
    identifier = instance_id(context, deletion)
    tag = task_image_tag(identifier)
    created_images.append(tag)  # first, so that a run failing in another job still removes this image
    patch = solution_patch(deletion)
    with tempfile.TemporaryDirectory(prefix="regrow-workspace-") as scratch:
        workspace = build_workspace(context.checkout.root, deletion, Path(scratch) / "workspace")
        build_task_image(context.backend, tag, context.repo_image, workspace)
        hits = check_leaks(context, tag, deletion, workspace)
    if hits:
        detail = ", ".join(f"{hit.path}: {hit.canary}" for hit in hits[:3])
        log.info("%s leaks: %s", identifier, detail)
        return BuiltTask(None, "leak", tag, 0, detail)
    oracle = oracle_check(context, tag, deletion, patch, verdict)
    if oracle.rejection:
        return BuiltTask(None, oracle.rejection, tag, oracle.test_executions)
    unit = deletion.unit
    module_name = context.layout.modules[unit.path]
    record = TaskRecord(
        instance_id=identifier,
        repo=context.checkout.repo_name,
        source_commit=context.checkout.commit,
        image=tag,
        mode=deletion.mode,
        deleted=[DeletedUnit(path=unit.path, qualname=unit.qualname, kind=unit.kind, start_line=unit.start_line, end_line=unit.end_line)],
        problem_statement=rewrite_problem_statement(
            problem_statement(deletion, module_name, verdict.fail_to_pass, context.baseline.test_texts), context.settings
        ),
        FAIL_TO_PASS=verdict.fail_to_pass,
        PASS_TO_PASS=verdict.pass_to_pass,
        test_command=context.settings.test_command,
        solution_patch=patch,
        test_files=list(context.layout.test_files),
        split=context.settings.split,
        pytest_plugins=oracle.pytest_plugins,
        stats=TaskStats(
            lines_deleted=sum(1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")),
            covering_tests=len(context.baseline.covering(unit)),
            complexity=unit.complexity,
        ),
        created_at=datetime.now(UTC),
        synth_version=regrow_version(),
    )
    return BuiltTask(record, None, tag, oracle.test_executions, io_checks=oracle.io_checks)
