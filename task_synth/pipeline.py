"""`synthesize`: a repository in, validated leak-free tasks out (records, workspace archives, hidden files), all on one
repository image.

The recipe, stage by stage: prepare the repository and its baseline (repository/, validation/repo_context.py), delete
each candidate unit (candidates/), validate the deletion (validation/), assemble its workspace (store/), check the
finished task (validation/task_checks.py), then write its record and the store (store/).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from proto.tasks import IoCheck, TaskRecord
from sandbox import DockerBackend
from sandbox.errors import SandboxError
from sandbox.lifecycle.owner import OWNER_LABEL
from sandbox.lifecycle.reaper import Reaper
from task_synth.candidates.coverage_groups import coverage_groups, narrowed
from task_synth.candidates.deletion import MODE_KINDS, Deletion, DeletionError, delete_unit
from task_synth.candidates.units import Unit, enumerate_units, rank_weight, sample_units
from task_synth.errors import SynthError
from task_synth.repository.repo_image import SYNTH_LABEL
from task_synth.repository.source import require_source
from task_synth.settings import SynthSettings
from task_synth.setup_failures import SYNTHESIS_ERROR, repeated_setup_failure, setup_cause
from task_synth.store.candidate_journal import VALID, CandidateJournal, Judged
from task_synth.store.repeats import KeptTasks, snapshot
from task_synth.store.store_writer import RepoFiles, StoreWriter
from task_synth.store.task_builder import BuiltTask, build_task, repo_dir, task_workspace
from task_synth.store.twins import seeded_twin
from task_synth.validation.repo_context import RepoContext, prepare_repo
from task_synth.validation.task_checks import check_task
from task_synth.validation.verdict import REJECTIONS, validate

log = logging.getLogger(__name__)
Progress = Callable[[str, int, int], None]


@dataclass
class SynthReport:
    """What a run made and what it threw away, with the costs the summary table shows."""

    repo: str = ""
    commit: str = ""
    repo_image: str = ""
    out_dir: Path | None = None
    candidates: int = 0
    records: list[TaskRecord] = field(default_factory=list)
    io_checks: dict[str, list[IoCheck]] = field(default_factory=dict)
    twins: list[tuple[TaskRecord, str, list[IoCheck]]] = field(default_factory=list)
    max_tasks: int = 0
    offered: int = 0  # every candidate the repository offers in the run's modes and kinds, past any budget
    budgeted: int = 0  # the candidates this run would try at most (settings.candidate_budget of them)
    resumed: int = 0  # tasks an earlier run of this snapshot left in the store, counted toward max_tasks
    skipped: int = 0  # candidates an earlier run judged, not validated again
    rejections: Counter = field(default_factory=lambda: Counter({reason: 0 for reason in REJECTIONS}))
    baseline_tests: int = 0
    stable_tests: int = 0
    test_executions: int = 0
    wall_s: float = 0.0
    stages: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def valid(self) -> int:
        """The tasks this run made; `resumed` counts those of earlier runs."""
        return len(self.records)

    @property
    def stopped_by(self) -> str:
        """What ended the run: the cap on tasks, the candidate budget, or the repository running out of candidates."""
        if self.valid + self.resumed >= self.max_tasks:
            return "max_tasks"
        return "candidate budget" if self.budgeted < self.offered else "candidates"

    @property
    def tasks_per_hour(self) -> float:
        return 3600 * self.valid / self.wall_s if self.wall_s else 0.0

    @property
    def test_executions_per_task(self) -> float:
        return self.test_executions / self.valid if self.valid else float(self.test_executions)


def ordered_candidates(
    context: RepoContext, units: list[Unit], modes: list[str], seed: int, budget: int
) -> list[tuple[Unit, str]]:
    """Units sampled per mode by rank weight, interleaved across modes, deterministic for a seed; units whose body
    runs at import time come after the others (six: most of its module runs as it loads). Where it can, each mode
    takes a unit no other mode has taken yet: a stub and a removal of one unit are one feature (store/repeats.py)."""
    tiers: list[list[list[tuple[Unit, str]]]] = [[], []]  # per tier, per mode
    for mode in modes:
        weighted = [
            (unit, rank_weight(unit, len(context.baseline.covering(unit))))
            for unit in units
            if unit.kind in MODE_KINDS[mode]
        ]
        at_import = [pair for pair in weighted if context.baseline.runs_at_import(pair[0])]
        late = {id(pair[0]) for pair in at_import}
        first = sample_units([pair for pair in weighted if id(pair[0]) not in late], budget, seed)
        tiers[0].append([(unit, mode) for unit in first])
        tiers[1].append([(unit, mode) for unit in sample_units(at_import, budget - len(first), seed)])
    taken: set[str] = set()
    return [pair for groups in tiers for pair in _interleaved(groups, taken)][:budget]


def _interleaved(groups: list[list[tuple[Unit, str]]], taken: set[str]) -> list[tuple[Unit, str]]:
    """One of each group in turn, each taking its first unit not in `taken` (else its first), until all are empty."""
    queues, order = [list(group) for group in groups], []
    while any(queues):
        for queue in queues:
            if queue:
                index = next((i for i, (unit, _) in enumerate(queue) if unit.key not in taken), 0)
                unit, mode = queue.pop(index)
                taken.add(unit.key)
                order.append((unit, mode))
    return order


def _candidate_or_error(
    context: RepoContext, pool, unit: Unit, mode: str, kept: KeptTasks
) -> tuple[BuiltTask | None, int]:
    """`_candidate`, where an unexpected error of regrow's own rejects the candidate instead of ending the run (its
    tasks kept so far stay either way); the engine's faults and bad input still end it."""
    try:
        return _candidate(context, pool, unit, mode, kept)
    except (SandboxError, SynthError):
        raise
    except Exception as error:
        log.exception("%s (%s): %s: judging it raised an unexpected error", unit.key, mode, SYNTHESIS_ERROR)
        return BuiltTask(None, SYNTHESIS_ERROR, None, 0, f"{type(error).__name__}: {error}"[:500]), 0


def _candidate(context: RepoContext, pool, unit: Unit, mode: str, kept: KeptTasks) -> tuple[BuiltTask | None, int]:
    """Validate one candidate in a pooled sandbox and, when valid and no repeat of a kept task, build its task;
    (task or None, test executions)."""
    of = snapshot(context.checkout.repo_name, context.checkout.commit)
    lines = [(piece.path, piece.start_line, piece.end_line) for piece in unit.pieces]
    repeated = kept.repeated_lines(of, lines)
    if repeated:  # the same lines as a kept task: nothing to validate
        log.info("%s (%s): duplicate: %s", unit.key, mode, repeated)
        return BuiltTask(None, "duplicate", None, 0, repeated), 0
    try:
        deletion: Deletion = delete_unit(context.layout, unit, mode)
    except DeletionError as error:
        log.debug("skipping %s in mode %s: %s", unit.key, mode, error)
        return None, 0
    settings = context.settings
    sb = pool.get()
    try:
        verdict = validate(
            sb, context.baseline, deletion, context.layout.modules[unit.path], settings, clock=context.clock
        )
    finally:
        pool.put(sb)
    if verdict.rejection:
        log.info("%s (%s): %s %s", unit.key, mode, verdict.rejection, verdict.detail)
        return BuiltTask(
            None, verdict.rejection, None, verdict.test_executions, verdict.detail
        ), verdict.test_executions
    repeated = kept.repeated_before_build(of, lines, verdict.fail_to_pass)
    if repeated:  # known now, before the recording and mutants that make most of a task's cost
        log.info("%s (%s): duplicate: %s", unit.key, mode, repeated)
        return BuiltTask(None, "duplicate", None, verdict.test_executions, repeated), verdict.test_executions
    workspace = task_workspace(context, deletion)
    checked = check_task(context, deletion, verdict, workspace.archive, workspace.patch)
    built = build_task(context, deletion, workspace, checked)
    if built.rejection:
        log.info("%s (%s): %s %s", unit.key, mode, built.rejection, built.detail)
    return built, verdict.test_executions + built.test_executions


class SynthStopped(SynthError):
    """A run stopped by Ctrl-C or SIGTERM, with what it kept."""


def _reap_orphans(backend: DockerBackend) -> None:
    """Remove the sandboxes of runs that died without cleaning up (a SIGKILL), before making more."""
    try:
        Reaper(backend).reap_once()
    except Exception as error:  # an engine that cannot list now fails the run at its first sandbox, with a remedy
        log.warning("could not reap the sandboxes of earlier runs: %s", error)


def synthesize(
    source: str,
    out_dir: Path,
    settings: SynthSettings | None = None,
    backend: DockerBackend | None = None,
    on_progress: Progress | None = None,
) -> SynthReport:
    """Make up to `settings.max_tasks` tasks from `source` into the task store `out_dir`, each written as soon as it
    is validated; a rerun into the same store goes on where the last run of this snapshot stopped.

    Raises SynthError (one line, with the remedy) on bad input; then no task, record or image of this run remains.
    Raises SynthStopped on Ctrl-C or SIGTERM; the tasks made so far stay, with the repository image they run on.
    """
    settings = settings or SynthSettings()
    require_source(source)  # a mistyped path is named before the engine is asked for anything
    backend = backend or DockerBackend()
    _reap_orphans(backend)
    progress = on_progress or (lambda stage, done, total: None)
    report = SynthReport(out_dir=out_dir)
    started = time.monotonic()
    created_images: list[str] = []
    writer: StoreWriter | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="regrow-synth-") as scratch:
            context = prepare_repo(
                source, settings, backend, Path(scratch), created_images, lambda name: progress(name, 0, 1)
            )
            report.repo, report.commit, report.repo_image = (
                context.checkout.repo_name,
                context.checkout.commit,
                context.repo_image,
            )
            report.baseline_tests, report.stable_tests = len(context.baseline.collected), len(context.baseline.stable)
            report.test_executions = context.baseline.test_executions
            units = enumerate_units(context.layout)
            units += coverage_groups(units, context.baseline.covering, context.baseline.runs_at_import)
            units = [u for u in units if settings.kinds is None or u.kind in settings.kinds]
            budget = settings.candidate_budget
            candidates = ordered_candidates(context, units, list(settings.modes), settings.seed, budget)
            every = len(units) * len(settings.modes)
            report.offered = len(ordered_candidates(context, units, list(settings.modes), settings.seed, every))
            report.max_tasks, report.budgeted = settings.max_tasks, len(candidates)
            repo = RepoFiles(repo_dir(context), context.install_archive, context.wheelhouse)
            writer = StoreWriter(out_dir, context.checkout.root, repo, mixed_splits=settings.split_by == "file")
            journal = CandidateJournal(out_dir, repo.folder)
            try:
                _run_candidates(context, candidates, settings, report, progress, writer, journal)
            finally:
                writer.close()
    except KeyboardInterrupt:
        # Whatever the signal interrupted (a create whose start never came, a sandbox before its `with`), this run's
        # sandboxes go now: a sweep by label, not a catalogue of the places a signal can land.
        _remove_synth_sandboxes(backend)
        kept = writer.added if writer else 0
        if not kept:
            _remove(backend, created_images)
        raise SynthStopped(
            f"stopped: {kept} new task(s) kept in {out_dir}; run the same command again to go on from there"
        ) from None
    except BaseException:
        if writer is None or not writer.added:
            _remove(backend, created_images)
        raise
    report.wall_s = time.monotonic() - started
    report.stages = context.clock.report()
    return report


def _remove(backend: DockerBackend, images: list[str]) -> None:
    for image in images:
        backend.remove_image(image)


def _run_candidates(
    context,
    candidates,
    settings: SynthSettings,
    report: SynthReport,
    progress: Progress,
    writer: StoreWriter,
    journal: CandidateJournal,
) -> None:
    """Process candidates in order, `jobs` at a time, until max_tasks are valid: the same seed gives the same tasks.
    Candidates the journal has judged are skipped, and its valid ones count toward max_tasks.

    Raises SynthError when the first candidates all fail the same way for a reason outside them.
    """
    keys = [CandidateJournal.key(unit.key, mode) for unit, mode in candidates]
    done = {key: journal.judged[key] for key in keys if key in journal.judged}
    report.skipped = len(done)
    report.resumed = sum(j.outcome == VALID and j.instance_id in writer.records for j in done.values())
    pending = [pair for pair, key in zip(candidates, keys, strict=True) if key not in done]
    if done:
        log.info("%d candidates judged by an earlier run (%d tasks): going on", len(done), report.resumed)
    progress("candidates", len(done), len(candidates))
    judging = _Judging(settings, report, writer, journal, KeptTasks(writer.records.values()), keys, pending)

    def judge(pool, executor: ThreadPoolExecutor) -> None:
        index = 0
        while index < len(pending) and not judging.full:
            batch = pending[index : index + settings.jobs]
            index += len(batch)
            results = list(
                executor.map(lambda pair: _candidate_or_error(context, pool, pair[0], pair[1], judging.kept), batch)
            )
            for (unit, mode), (built, executions) in zip(batch, results, strict=True):
                judging.take(unit, mode, built, executions)
            progress("candidates", len(done) + index, len(candidates))
            failure = repeated_setup_failure(judging.outcomes)
            if failure:
                raise SynthError(failure)

    with context.sandbox_pool(min(settings.jobs, max(1, len(pending)))) as pool:
        executor = ThreadPoolExecutor(settings.jobs)
        try:
            judge(pool, executor)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM: end the candidates in flight now, not when their suites end (minutes for some).
            executor.shutdown(wait=False, cancel_futures=True)
            _remove_synth_sandboxes(context.backend)
            raise
        executor.shutdown(wait=True)


@dataclass
class _Judging:
    """A run's candidates as they are judged: where the tasks go, what is kept, the candidates still to judge (the
    run's `keys` and any that come back as part of a group), and each judged candidate's (rejection, detail)."""

    settings: SynthSettings
    report: SynthReport
    writer: StoreWriter
    journal: CandidateJournal
    kept: KeptTasks
    keys: list[str]
    pending: list[tuple[Unit, str]]
    outcomes: list[tuple[str | None, str]] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.report.valid + self.report.resumed >= self.settings.max_tasks

    def take(self, unit: Unit, mode: str, built: BuiltTask | None, executions: int) -> None:
        """Count one judged candidate; keep its task, or journal its rejection and try what is left of a group."""
        self.report.test_executions += executions
        if built is None:
            return
        self.outcomes.append((built.rejection, built.detail))
        self.report.candidates += 1
        key = CandidateJournal.key(unit.key, mode)
        repeated = self.kept.repeated_by(built.record) if built.record is not None else None
        if repeated:
            log.info("%s (%s): duplicate: %s", unit.key, mode, repeated)
            built = BuiltTask(None, "duplicate", None, built.test_executions, repeated)
        if built.record is not None and built.workspace is not None:
            if self.full:
                return  # valid, but past the cap: judged again by a run with a higher one
            _keep(built, self.settings, self.report, self.writer)
            self.kept.add(built.record)
            self.journal.record(key, Judged(VALID, built.record.instance_id, executions))
        elif built.rejection:
            self.report.rejections[built.rejection] += 1
            if setup_cause(built.rejection) is None:  # a setup failure may pass once the setup is fixed
                self.journal.record(key, Judged(built.rejection, None, executions))
            known = {*self.keys, *(CandidateJournal.key(other.key, m) for other, m in self.pending)}
            self.pending.extend(_without_unchecked(unit, mode, built, known))


def _without_unchecked(unit: Unit, mode: str, built: BuiltTask, known: set[str]) -> list[tuple[Unit, str]]:
    """A group no secret check could judge in part, or whose checks of some parts kill too few of their mutants, comes
    back as a candidate of the other parts: a group keeps only units with evidence."""
    left = narrowed(unit, built.unchecked) if built.rejection in ("no_evidence", "weak_checks") else None
    if left is None or CandidateJournal.key(left.key, mode) in known:
        return []
    log.info("%s (%s): tried again without %s", unit.key, mode, ", ".join(built.unchecked))
    return [(left, mode)]


def _remove_synth_sandboxes(backend) -> None:
    """Remove every sandbox this process's synthesis started (validation, install and oracle containers), so the
    commands in flight in them end at once."""
    for container in backend.containers_labelled({OWNER_LABEL: backend.owner}):
        if SYNTH_LABEL in (container.get("Labels") or {}):
            backend.remove(container["Id"])


def _keep(built: BuiltTask, settings: SynthSettings, report: SynthReport, writer: StoreWriter) -> None:
    """Write a valid task (and its twin) to the store now, and count it."""
    assert built.record is not None and built.workspace is not None
    record = built.record
    twin = seeded_twin(record, built.io_checks, settings.seed) if settings.twins else None
    writer.add(record, built.io_checks, built.workspace, twin)
    report.records.append(record)
    report.io_checks[record.instance_id] = built.io_checks
    if twin is not None:
        report.twins.append((twin[0], record.instance_id, twin[1]))
