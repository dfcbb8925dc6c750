"""`regrow traces regrade`: stored episodes' submissions graded again by the current grader, so that the rewards a
weaker grader paid for forgeries show up as lowered ones.

Each episode's /workspace is rebuilt from its task's workspace archive with the stored change set applied (or, for
an episode recorded before change sets were kept, the one its whole diff shows), and graded by `grade_workspace`
in a fresh sandbox, as a `submit` is.
"""

from __future__ import annotations

import gzip
import io
import logging
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from env_server.grading.applied_diff import NotReplayable, change_set_from_diff
from env_server.grading.change_set import ChangeSet, Entry, Tree, read_tree
from env_server.grading.pristine import PristineCache
from env_server.grading.submission import grade_workspace
from env_server.settings import GradeLimits
from env_server.task_store import Task, TaskStore, UnknownTask
from env_server.traces.store import TraceStore
from proto.observations import RewardDetails
from proto.traces import EpisodeTrace
from sandbox import Sandbox, SandboxError
from sandbox.layout import AGENT_UID

log = logging.getLogger(__name__)

REWARD_TOLERANCE = 1e-9
# The task's own files are read whole: the rebuilt workspace must match them byte for byte, or they count as changed.
_WHOLE = 1 << 62


@dataclass(frozen=True)
class Grading:
    """What re-grading needs: a fresh, started sandbox holding a task's workspace, and the grader's limits."""

    fresh_sandbox: Callable[[Task], Sandbox]
    limits: GradeLimits
    pristine: PristineCache = field(default_factory=PristineCache)


@dataclass(frozen=True)
class Submission:
    """What an episode's grading graded, rebuilt: its task, its stored grading, and the workspace to grade again."""

    task: Task
    graded: RewardDetails
    source: Literal["change_set", "diff"]  # the change set stored at grading, or the one the recorded diff shows
    workspace: bytes  # a tar of /workspace, as the engine's archive API sends it


@dataclass(frozen=True)
class Regraded:
    """One episode graded again: its stored and new reward, what each stands on, and what went wrong if anything."""

    episode_id: str
    task_id: str
    old_reward: float | None
    new_reward: float | None
    old_basis: str | None
    new_basis: str | None
    source: str
    error: str | None = None  # the new grading's own error (a timeout), or why it could not run

    @property
    def delta(self) -> float | None:
        """The new reward less the stored one; None when either is missing."""
        if self.old_reward is None or self.new_reward is None:
            return None
        return self.new_reward - self.old_reward

    @property
    def changed(self) -> bool:
        return self.delta is not None and abs(self.delta) > REWARD_TOLERANCE

    @property
    def lowered(self) -> bool:
        """A stored reward this grader does not pay: a forgery, or a check that grew stricter."""
        return self.changed and (self.delta or 0.0) < 0


@dataclass(frozen=True)
class Skipped:
    """An episode that cannot be graded again, and why."""

    episode_id: str
    task_id: str | None
    reason: str


@dataclass
class RegradeReport:
    """Every episode graded again or skipped, in the order they were taken."""

    episodes: list[Regraded] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def add(self, result: Regraded | Skipped) -> None:
        if isinstance(result, Skipped):
            self.skipped.append(result)
        else:
            self.episodes.append(result)

    def totals(self) -> RegradeTotals:
        graded = [result for result in self.episodes if result.new_reward is not None]
        return RegradeTotals(
            regraded=len(graded),
            changed=sum(result.changed for result in graded),
            lowered=sum(result.lowered for result in graded),
            raised=sum(result.changed and not result.lowered for result in graded),
            failed=len(self.episodes) - len(graded),
            skipped=len(self.skipped),
        )


@dataclass(frozen=True)
class RegradeTotals:
    """How many episodes were graded again, how many rewards changed which way, and how many could not be graded."""

    regraded: int
    changed: int
    lowered: int
    raised: int
    failed: int  # the grading itself failed (the engine, a sandbox)
    skipped: int  # no submission could be rebuilt


def regrade(
    store: TraceStore,
    tasks: TaskStore,
    grading: Grading,
    episode_ids: Sequence[str] = (),
    max_episodes: int | None = None,
    on_result: Callable[[Regraded | Skipped], None] | None = None,
) -> RegradeReport:
    """Grade the named episodes again (else every graded one, newest first), at most `max_episodes` of them."""
    report = RegradeReport()
    for episode_id in selected_episodes(store, episode_ids, max_episodes):
        result = regrade_episode(store, tasks, grading, episode_id)
        report.add(result)
        if on_result is not None:
            on_result(result)
    totals = report.totals()
    log.info(
        "re-graded %d episodes: %d rewards changed, %d lowered; %d failed, %d skipped",
        totals.regraded,
        totals.changed,
        totals.lowered,
        totals.failed,
        totals.skipped,
    )
    return report


def selected_episodes(store: TraceStore, episode_ids: Sequence[str], max_episodes: int | None) -> list[str]:
    """The ids named (each once), or every graded episode's, newest first; cut at `max_episodes`."""
    if episode_ids:
        chosen = list(dict.fromkeys(episode_ids))
    else:
        rows = store.read("SELECT episode_id FROM episodes WHERE reward_details IS NOT NULL ORDER BY started_at DESC")
        chosen = [row[0] for row in rows]
    return chosen if max_episodes is None else chosen[:max_episodes]


def regrade_episode(store: TraceStore, tasks: TaskStore, grading: Grading, episode_id: str) -> Regraded | Skipped:
    """One stored episode graded again, or skipped with the reason."""
    trace = store.get_episode(episode_id)
    if trace is None:
        return Skipped(episode_id, None, f"no episode {episode_id} in {store.path}")
    try:
        submission = recorded_submission(store, tasks, trace)
    except NotReplayable as error:
        return Skipped(episode_id, trace.task_id, str(error))
    return grade_again(trace, submission, grading)


def recorded_submission(store: TraceStore, tasks: TaskStore, trace: EpisodeTrace) -> Submission:
    """The episode's graded workspace, rebuilt from its stored change set, else from the change set its diff shows."""
    details = trace.reward_details
    if details is None:
        raise NotReplayable(f"it was not graded (status {trace.status})")
    try:
        task = tasks.get(trace.task_id)
    except UnknownTask:
        raise NotReplayable(
            f"its task {trace.task_id} is not in {tasks.root}: pass the --tasks it was served from"
        ) from None
    if not task.as_files:
        raise NotReplayable(
            f"its task keeps its workspace inside its image ({task.record.image}): synthesize the store again with "
            "this regrow, which stores every task as files"
        )
    tree = task_tree(task)
    stored = store.get_submission(trace.episode_id)
    if stored is not None:
        return Submission(task, details, "change_set", workspace_tar(tree, stored))
    if details.error and not details.diff:
        raise NotReplayable(f"its grading failed before it read a change set ({details.error})")
    return Submission(task, details, "diff", workspace_tar(tree, change_set_from_diff(details.diff, tree)))


def grade_again(trace: EpisodeTrace, submission: Submission, grading: Grading) -> Regraded:
    """Grade the rebuilt workspace as a `submit` is graded, in the reward mode the episode was graded in."""
    task, old = submission.task, submission.graded
    limits = replace(grading.limits, mode=old.mode)
    try:
        new = grade_workspace(
            task, lambda _: [submission.workspace], lambda: grading.fresh_sandbox(task), grading.pristine, limits
        )
    except (SandboxError, OSError, ValueError, tarfile.TarError) as error:
        log.warning("re-grading episode %s failed: %s", trace.episode_id, error)
        return Regraded(
            trace.episode_id,
            trace.task_id,
            trace.reward,
            None,
            old.basis,
            None,
            submission.source,
            f"re-grading failed: {error}",
        )
    return Regraded(
        trace.episode_id, trace.task_id, trace.reward, new.reward, old.basis, new.basis, submission.source, new.error
    )


def task_tree(task: Task) -> Tree:
    """The task's /workspace as its archive holds it, every file's bytes kept."""
    return read_tree([gzip.decompress(task.workspace_archive())], lambda _path, _entry: True, file_cap=_WHOLE)


def workspace_tar(tree: Tree, changes: ChangeSet, root: str = "workspace") -> bytes:
    """A tar of `tree` with `changes` applied, rooted at `root/` as the engine's archive API sends a folder."""
    buffer = io.BytesIO()
    gone = {*changes.deleted, *changes.written}
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, entry in sorted(tree.entries.items()):
            if path not in gone:
                _add(archive, f"{root}/{path}", entry, tree.data.get(path))
        for path, data in sorted(changes.written.items()):
            _add(archive, f"{root}/{path}", Entry("file", path in changes.executable, size=len(data)), data)
    return buffer.getvalue()


def _add(archive: tarfile.TarFile, name: str, entry: Entry, data: bytes | None) -> None:
    """One member that `read_tree` reads back as `entry` (a link's or other member's target is its digest)."""
    info = tarfile.TarInfo(name)
    info.uid = info.gid = AGENT_UID
    if entry.kind == "file":
        if data is None:
            raise NotReplayable(f"the task's {name} could not be read whole to rebuild the workspace")
        info.size, info.mode = len(data), 0o755 if entry.executable else 0o644
        archive.addfile(info, io.BytesIO(data))
        return
    info.type = {"dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE}.get(entry.kind, tarfile.LNKTYPE)
    info.mode = 0o755 if entry.kind == "dir" else 0o777
    info.linkname = entry.digest
    archive.addfile(info)
