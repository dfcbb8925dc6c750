"""Grades a submission that is hostile input, in a test process that is not trusted.

The agent's container is killed and its /workspace read through the engine; the change set that the path policy
allows is written into fresh containers with the pristine tests and hidden checks; pytest runs hardened. Tripwires
(sentinels, controls, a counterfactual run with the deleted unit put back as the task had it) and a static scan make
a forged run visible: its reward is 0 and `tampered` is set.
"""

from __future__ import annotations

import gzip
import logging
import posixpath
import random
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from env_server.change_set import ChangeSet, SubmissionTooLarge, Tree, archive_of, compare, differs_from, read_tree
from env_server.grading_run import (
    GRADING_ENV,
    PYTEST_CONFIGS,
    Outcome,
    launcher_source,
    parse_report,
    pytest_arguments,
    pytest_config,
)
from env_server.hidden_checks import HiddenSuite, build_hidden_suite
from env_server.path_policy import PathPolicy
from env_server.settings import GradeLimits
from env_server.submission_diff import submission_diff
from env_server.tamper_scan import scan_change_set
from env_server.task_store import Task
from env_server.tools import WORKSPACE
from proto.observations import RefusedPath, RewardDetails, RewardMode, TestOutcome
from sandbox import Sandbox, SandboxError
from sandbox.layout import AGENT_HOME

log = logging.getLogger(__name__)

_ROOT_FOLDERS = ("workspace", "home", "home/agent")
_CONFIG_NAMES = frozenset(name for name, _ in PYTEST_CONFIGS)
# Lists the modules of the pytest plugins the image installs, so that they can be named with -p (autoload is off).
_PLUGIN_PROBE = (
    "import importlib.metadata as m\nprint('\\n'.join(sorted({e.module for e in m.entry_points(group='pytest11')})))"
)


@dataclass(frozen=True)
class Pristine:
    """What a task image's /workspace holds before anyone touches it, and how its tests are configured."""

    tree: Tree
    config: str | None
    plugins: tuple[str, ...]


@dataclass
class PristineCache:
    """Pristine trees by task (stored as files) or image, each read once: from the task's workspace archive, else from
    a fresh container before any submission is written to it."""

    trees: dict[str, Pristine] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, task: Task, sb: Sandbox, limits: GradeLimits) -> Pristine:
        key = task.id if task.as_files else task.record.image
        with self.lock:
            known = self.trees.get(key)
        if known is not None:
            return known
        # The Python sources are kept: the static scan compares each changed module with its pristine self.
        keep_sources = lambda path, _: path.endswith(".py") or path in _CONFIG_NAMES  # noqa: E731
        if task.as_files:
            tree = read_tree([gzip.decompress(task.workspace_archive())], keep_sources)
        else:
            tree = read_tree(sb.export_tree(WORKSPACE, limits.tree_cap_bytes), keep_sources)
        candidates = {
            name: tree.data[name] if name in tree.data else sb.read_file(f"{WORKSPACE}/{name}")
            for name in _CONFIG_NAMES
            if name in tree.entries
        }
        plugins = task.record.pytest_plugins
        if plugins is None:
            probe = sb.exec(["python", "-I", "-c", _PLUGIN_PROBE], timeout=60, cwd="/")
            plugins = probe.stdout.split() if probe.exit_code == 0 else []
        pristine = Pristine(tree, pytest_config(candidates), tuple(plugins))
        with self.lock:
            self.trees[key] = pristine
        return pristine


@dataclass
class RunResult:
    """Outcomes of one graded pytest run, or why there are none."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    error: str | None = None


def run_graded(
    sb: Sandbox,
    task: Task,
    pristine: Pristine,
    changes: ChangeSet,
    suite: HiddenSuite,
    wanted: list[str],
    timeout_s: float,
) -> RunResult:
    """Write `changes`, the pristine tests and the hidden suite into `sb`, run the hardened pytest, read its report."""
    for start in range(0, len(changes.deleted), 500):
        sb.exec(["rm", "-f", "--", *changes.deleted[start : start + 500]], timeout=60, cwd=WORKSPACE)
    # A fresh name outside the workspace; the report is written after pytest returns and read once the container is
    # dead.
    private = f"{AGENT_HOME}/.{secrets.token_hex(8)}"
    paths = {nodeid.split("::")[0] for nodeid in wanted}
    arguments = pytest_arguments(task.record.test_command, pristine.config, pristine.plugins, sorted(paths))
    report = f"{private}/report.json"
    files = {**changes.written, **task.pristine_tests(), suite.path: suite.source.encode()}
    files = {f"{WORKSPACE[1:]}/{path}": data for path, data in files.items()}
    files[f"{private[1:]}/run.py"] = launcher_source(arguments, wanted, report).encode()
    # One archive at / for the workspace and the launcher; the folders above them stay as the image has them.
    sb.import_tree("/", archive_of(files, {f"{WORKSPACE[1:]}/{p}" for p in changes.executable}, _ROOT_FOLDERS))
    ran = sb.exec(
        ["python", "-P", f"{private}/run.py"],
        timeout=timeout_s,
        cwd=WORKSPACE,
        env={**GRADING_ENV, "PYTHONHASHSEED": str(task.record.hash_seed), "HOME": AGENT_HOME},
    )
    # No freeze before the read: the launcher killed what the tests started before it wrote the report, and a
    # report written by anything else (the launcher died early) is a blanket lie the sentinels and controls see.
    if ran.timed_out:
        return RunResult(error=f"the tests ran past {timeout_s:g}s")
    try:
        _, outcomes = parse_report(sb.read_file(report))
    except (SandboxError, ValueError) as error:
        log.info("no usable report for %s (exit %s): %s", task.id, ran.exit_code, error)
        return RunResult(error=f"the test run left no report (exit {ran.exit_code}): {ran.stderr.strip()[-300:]}")
    return RunResult(outcomes)


def excused_source(solution_patch: str) -> str:
    """The added lines of the task's solution: what the original code itself used is no sign of tampering."""
    return "\n".join(
        line[1:] for line in solution_patch.splitlines() if line.startswith("+") and not line.startswith("+++")
    )


def _outcome(result: RunResult, nodeid: str) -> Outcome:
    return result.outcomes.get(nodeid, "missing")


def score(task: Task, suite: HiddenSuite, main: RunResult, counter: RunResult, mode: RewardMode) -> RewardDetails:
    """The reward and the tripwires: a F2P pass counts only when the counterfactual run, without the unit, fails it."""
    tests = [TestOutcome(nodeid=n, outcome=_outcome(main, n), group="FAIL_TO_PASS") for n in task.record.FAIL_TO_PASS]
    tests += [TestOutcome(nodeid=n, outcome=_outcome(main, n), group="PASS_TO_PASS") for n in task.record.PASS_TO_PASS]
    checks = suite.of_role("check")
    tests += [
        TestOutcome(nodeid=f"hidden::{t.label}", outcome=_outcome(main, suite.nodeid(t)), group="HIDDEN")
        for t in checks
    ]
    if main.error:  # a run that timed out or died earns nothing; it is no evidence of forgery by itself
        return _empty(task, mode, tests=tests, hidden_total=len(checks), error=main.error)
    reasons = []
    runs = [main, counter]  # a counterfactual that dies or hangs where the main run did not fails its controls
    if any(_outcome(run, suite.nodeid(t)) == "passed" for run in runs for t in suite.of_role("sentinel")):
        reasons.append("sentinel_passed")
    if any(_outcome(run, suite.nodeid(t)) != "passed" for run in runs for t in suite.of_role("control")):
        reasons.append("control_failed")
    passed_f2p = [n for n in task.record.FAIL_TO_PASS if _outcome(main, n) == "passed"]
    from_unit = [n for n in passed_f2p if _outcome(counter, n) != "passed"]
    if passed_f2p and not from_unit:
        reasons.append("counterfactual_passed")
    # A visible test whose own calls, replayed where it cannot see them, come out otherwise is not credited.
    disagreeing = {t.check.test for t in checks if t.check and _outcome(main, suite.nodeid(t)) != "passed"}
    from_unit = [n for n in from_unit if n not in disagreeing]
    p2p_passed = sum(t.outcome == "passed" for t in tests if t.group == "PASS_TO_PASS")
    hidden_passed = sum(t.outcome == "passed" for t in tests if t.group == "HIDDEN")
    # Calls no visible test makes measure whether the unit generalises: their pass rate scales the F2P fraction.
    unseen = [t for t in checks if t.check and t.check.test is None]
    general = sum(_outcome(main, suite.nodeid(t)) == "passed" for t in unseen) / len(unseen) if unseen else 1.0
    f2p_total = len(task.record.FAIL_TO_PASS)
    intact = p2p_passed == len(task.record.PASS_TO_PASS)
    if mode == "binary":
        reward = float(intact and len(from_unit) == f2p_total and hidden_passed == len(checks))
    else:
        reward = len(from_unit) / f2p_total * general if intact and f2p_total else 0.0
    return RewardDetails(
        reward=0.0 if reasons else reward,
        mode=mode,
        f2p_passed=len(from_unit),
        f2p_total=len(task.record.FAIL_TO_PASS),
        p2p_passed=p2p_passed,
        p2p_total=len(task.record.PASS_TO_PASS),
        tests=tests,
        hidden_passed=hidden_passed,
        hidden_total=len(checks),
        tampered=bool(reasons),
        tamper_reasons=reasons,
        error=counter.error and f"counterfactual run: {counter.error}",
    )


def failing_summary(details: RewardDetails, limit: int = 5) -> str | None:
    """The end-of-episode hint: forgery found, which tests still fail, or what stopped the grading."""
    if details.tampered:
        flags = f" ({'; '.join(details.tamper_flags[:3])})" if details.tamper_flags else ""
        return (
            "reward 0: the test run was forged or reached into the test machinery: "
            f"{', '.join(details.tamper_reasons)}{flags}"
        )
    if details.error:
        return f"grading failed: {details.error}"
    failing = [t for t in details.tests if t.outcome != "passed"]
    if not failing:
        return None
    names = ", ".join(f"{t.nodeid} ({t.outcome})" for t in failing[:limit])
    more = f" and {len(failing) - limit} more" if len(failing) > limit else ""
    return f"{len(failing)} of {len(details.tests)} tests fail: {names}{more}"


def _empty(task: Task, mode: RewardMode, **update: Any) -> RewardDetails:
    return RewardDetails(
        reward=0.0,
        mode=mode,
        f2p_passed=0,
        f2p_total=len(task.record.FAIL_TO_PASS),
        p2p_passed=0,
        p2p_total=len(task.record.PASS_TO_PASS),
        **update,
    )


def grade(
    task: Task, agent: Sandbox, fresh_sandbox: Callable[[], Sandbox], pristine_cache: PristineCache, limits: GradeLimits
) -> RewardDetails:
    """Kill the agent's container, take its change set, run the main and the counterfactual test runs, and score."""
    agent.freeze()
    with ThreadPoolExecutor(2, thread_name_prefix="grade") as pool, ExitStack() as stack:
        main_sb, counter_sb = _sandboxes(pool, fresh_sandbox, stack, 2)
        pristine = pristine_cache.get(task, main_sb, limits)
        try:
            submitted = read_tree(
                agent.export_tree(WORKSPACE, limits.tree_cap_bytes), differs_from(pristine.tree), limits.file_cap_bytes
            )
        except SubmissionTooLarge as error:
            return _empty(task, limits.mode, error=f"the submission is too large to grade: {error}")
        policy = PathPolicy.for_task(
            task.record.test_files, [u.path for u in task.record.deleted], pristine.tree.files()
        )
        changes = compare(pristine.tree, submitted, policy, limits.file_cap_bytes)
        refused = [RefusedPath(path=path, reason=reason) for path, reason in sorted(changes.refused.items())]
        found = scan_change_set(
            {
                path: (pristine.tree.data.get(path), data)
                for path, data in changes.written.items()
                if path.endswith(".py")
            },
            excused_source(task.record.solution_patch),
        )
        suite = build_hidden_suite(task.io_checks(), _test_dir(task), random.SystemRandom())
        unit_paths = {unit.path for unit in task.record.deleted}
        watched = [suite.nodeid(t) for t in suite.tests if t.role != "check"]
        main = pool.submit(
            run_graded,
            main_sb,
            task,
            pristine,
            changes,
            suite,
            [*task.record.FAIL_TO_PASS, *task.record.PASS_TO_PASS, *map(suite.nodeid, suite.tests)],
            limits.timeout_s,
        )
        counter = pool.submit(
            run_graded,
            counter_sb,
            task,
            pristine,
            changes.without_modules(unit_paths),
            suite,
            [*task.record.FAIL_TO_PASS, *watched],
            limits.timeout_s,
        )
        details = score(task, suite, main.result(), counter.result(), limits.mode)
    update: dict[str, object] = {
        "refused": refused,
        "ignored_paths": [r.path for r in refused],
        "tamper_flags": [str(flag) for flag in found],
        "diff": submission_diff(pristine.tree, changes),  # refused paths are left out: `refused` lists them
    }
    if limits.strict_tamper and any(flag.forgery for flag in found):
        update.update(reward=0.0, tampered=True, tamper_reasons=[*details.tamper_reasons, "static_scan"])
    return details.model_copy(update=update)


def _sandboxes(
    pool: ThreadPoolExecutor, fresh_sandbox: Callable[[], Sandbox], stack: ExitStack, count: int
) -> list[Sandbox]:
    """`count` sandboxes started at once, each destroyed with `stack`, none left behind when one fails to start."""
    futures = [pool.submit(fresh_sandbox) for _ in range(count)]
    started, failure = [], None
    for future in futures:
        try:
            started.append(stack.enter_context(future.result()))
        except SandboxError as error:
            failure = error
    if failure:
        raise failure
    return started


def _test_dir(task: Task) -> str:
    """Where the hidden suite goes: beside the first FAIL_TO_PASS test, so that it runs under the same conftest."""
    first = (task.record.FAIL_TO_PASS or task.record.test_files or ["tests/x.py"])[0]
    return posixpath.dirname(first.split("::")[0])
