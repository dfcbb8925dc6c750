"""Validating one deletion in a sandbox: F2P/P2P from predicted tests plus a sample, flakiness, trivial stand-ins."""

from __future__ import annotations

import ast
import logging
import random
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from proto.python_ast import parse_python
from sandbox import Sandbox
from sandbox.layout import WORKSPACE
from task_synth.candidates.deletion import Deletion
from task_synth.settings import SynthSettings
from task_synth.stage_clock import StageClock
from task_synth.validation.baseline import Baseline, suite_error
from task_synth.validation.stand_ins import combined_stand_in, stand_ins
from task_synth.validation.suite_runs import SuiteRun, run_tests

log = logging.getLogger(__name__)
REJECTIONS = (
    "no_f2p",
    "no_p2p",
    "flaky",
    "trivially_solvable",
    "import_broken",
    "leak",
    "unscannable",
    "oracle_failed",
    "weak_checks",
    "no_evidence",  # a deleted unit has no secret checks that one behaviour cannot pass (proto/evidence.py)
    "timeout",
    "duplicate",  # valid, but the same feature as a kept task (task_synth/store/repeats.py)
    "runner_broken",  # pytest itself stopped before reporting: the package is one pytest imports (pluggy, iniconfig)
)
# A trivial stand-in can loop forever (`while answer:`), so its runs get a timeout near what the deleted state needed.
STAND_IN_TIMEOUT_FACTOR = 3
# With a budget per round, a looping answer costs this once; a real round takes under the deleted state's whole run
# (pytest's start included), which the factor above scales. 10 s cost cachetools' popitem 21.6 s for two loops.
STAND_IN_MIN_TIMEOUT_S = 3.0
STAND_IN_SLACK_S = 20.0  # pytest's start and collection, outside every round's budget
# Imports each package named after it; run as `python -c` text, so nothing is written into the sandbox for it.
PACKAGE_IMPORTS_SOURCE = Path(__file__).with_name("inside") / "package_imports.py"


@dataclass
class Verdict:
    """What validating one deletion found; `rejection` is None for a valid task.

    `trivially_passed` are tests a trivial stand-in passes, kept out of both F2P and P2P; `test_executions` includes
    the `stand_in_executions` spent finding them.
    """

    rejection: str | None
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    predicted: list[str] = field(default_factory=list)
    test_executions: int = 0
    detail: str = ""
    trivially_passed: list[str] = field(default_factory=list)
    stand_in_executions: int = 0


def importing_test_files(test_texts: dict[str, str], names: set[str], modules: set[str]) -> set[str]:
    """Test files whose imports of `names` or `modules` run at import time, so a deletion breaks them whole."""
    files = set()
    for path, text in test_texts.items():
        tree = parse_python(text)
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                imported = {f"{node.module}.{alias.name}" for alias in node.names} | {node.module or ""}
                if {alias.name for alias in node.names} & names or imported & modules:
                    files.add(path)
            elif isinstance(node, ast.Import) and {alias.name for alias in node.names} & modules:
                files.add(path)
    return files


def broken_test_files(deletion: Deletion, test_texts: dict[str, str], module_name: str) -> set[str]:
    """Test files that cannot even be imported after the deletion."""
    unit = deletion.unit
    if deletion.mode == "file":
        return importing_test_files(test_texts, set(), {module_name})
    if deletion.mode == "remove":
        names = {name for piece in unit.pieces if piece.kind != "method" for name in (piece.qualname, *piece.helpers)}
        return importing_test_files(test_texts, names, set()) if names else set()
    return set()


def mentioned_names(deletion: Deletion) -> set[str]:
    """What a test would name to reach the deleted code: a private or dunder method is reached through its class,
    a deleted module through any name it defined; a group, through any of its parts."""
    if deletion.unit.parts:
        return {name for piece in deletion.unit.parts for name in _names_of(piece.qualname)}
    if deletion.unit.kind == "module":
        tree = parse_python(deletion.original[deletion.unit.path]) or ast.Module(body=[], type_ignores=[])
        defined = {
            node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        defined |= {
            t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
        }
        return {deletion.unit.qualname.rsplit(".", 1)[-1], *defined}
    return _names_of(deletion.unit.qualname)


def _names_of(qualname: str) -> set[str]:
    """The name a test would use for a function or method: a private or dunder method's class."""
    owner, _, member = qualname.partition(".")
    if member:
        return {owner} if member.startswith("_") else {member}
    return {owner}


def predicted_tests(baseline: Baseline, deletion: Deletion, module_name: str) -> set[str]:
    """Tests that execute the deleted code (coverage), that name it, or that sit in a test file importing what is gone.

    Naming catches code that coverage attributes to no test, such as code run in a thread.
    """
    files = broken_test_files(deletion, baseline.test_texts, module_name)
    named = set().union(*(baseline.mentions.get(name, set()) for name in mentioned_names(deletion)))
    return baseline.covering(deletion.unit) | {
        test for test in baseline.stable if test.split("::")[0] in files or test.split("[")[0] in named
    }


def apply_deletion(sb: Sandbox, deletion: Deletion, restore: bool = False) -> None:
    """Write the deleted state of the changed files into /workspace (or their originals back with restore=True)."""
    gone = []
    for path, text in deletion.changed.items():
        content = deletion.original[path] if restore else text
        if content is None:
            gone.append(f"{WORKSPACE}/{path}")
        else:
            sb.write_file(f"{WORKSPACE}/{path}", content)
    if gone:
        sb.exec(f"rm -f {' '.join(shlex.quote(path) for path in gone)}", timeout=30)


def import_check(sb: Sandbox, packages: list[str], timeout: float) -> str | None:
    """None when every top-level package imports, else the error's last line."""
    result = sb.exec(["python", "-c", PACKAGE_IMPORTS_SOURCE.read_text(), *packages], timeout=timeout, cwd=WORKSPACE)
    if result.exit_code == 0:
        return None
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {result.exit_code}"


def _timeout_detail(run: SuiteRun, timeout: float) -> str:
    lines = run.output_tail.strip().splitlines()
    return f"the tests ran past {timeout:.0f}s" + (f"; last output: {lines[-1]}" if lines else "")


def _drop(deletion: Deletion, verdict: Verdict, name: str, passed: list[str]) -> bool:
    """Drop the F2P tests stand-in `name` passed; True when none is left (the verdict is then trivially_solvable)."""
    if not passed:
        return False
    shown = ", ".join(passed[:5]) + (f" and {len(passed) - 5} more" if len(passed) > 5 else "")
    log.info("%s: `%s` passes %s", deletion.unit.key, name, shown)  # PyYAML: 1,000 ids in one line
    verdict.trivially_passed += passed
    verdict.fail_to_pass = [test for test in verdict.fail_to_pass if test not in passed]
    if verdict.fail_to_pass:
        return False
    verdict.rejection = "trivially_solvable"
    verdict.detail = f"`{name}` passes every remaining FAIL_TO_PASS test ({', '.join(passed)})"
    return True


def drop_trivially_passed(
    sb: Sandbox, deletion: Deletion, verdict: Verdict, test_command: str, timeout: float
) -> Verdict:
    """Run the F2P tests against every trivial stand-in and drop those any stand-in passes; a task left with none is
    `trivially_solvable`. A function's answers share one pytest process (a round each); when that run times out, they
    run one by one. Leaves a stand-in in /workspace: the caller restores it.
    """
    budget = {"REGROW_ROUND_BUDGET_S": f"{timeout:g}"}  # a looping answer costs its round, not the process
    combined = combined_stand_in(deletion)
    if combined is not None:
        stand_in, names = combined
        apply_deletion(sb, replace(deletion, changed=stand_in.changed))
        tests = list(verdict.fail_to_pass)
        started = time.monotonic()
        run = run_tests(sb, test_command, tests, timeout * len(names) + STAND_IN_SLACK_S, budget, repeat=len(names))
        log.info(
            "%s: %d trivial answers on %d tests in %.1fs%s",
            deletion.unit.key,
            len(names),
            len(tests),
            time.monotonic() - started,
            " (timed out)" if run.timed_out else "",
        )
        verdict.stand_in_executions += run.executions
        verdict.test_executions += run.executions
        if not run.timed_out and len(run.rounds) == len(names):
            for name, outcomes in zip(names, run.rounds, strict=True):
                if _drop(deletion, verdict, name, [test for test in verdict.fail_to_pass if outcomes.get(test, False)]):
                    break
            return verdict
    for stand_in in stand_ins(deletion):
        apply_deletion(sb, replace(deletion, changed=stand_in.changed))
        run = run_tests(sb, test_command, verdict.fail_to_pass, timeout + STAND_IN_SLACK_S, budget)
        verdict.stand_in_executions += run.executions
        verdict.test_executions += run.executions
        if _drop(
            deletion, verdict, stand_in.name, sorted(set(verdict.fail_to_pass) - run.failed(verdict.fail_to_pass))
        ):
            break
    return verdict


def validate(
    sb: Sandbox,
    baseline: Baseline,
    deletion: Deletion,
    module_name: str,
    settings: SynthSettings,
    naive: bool = False,
    clock: StageClock | None = None,
) -> Verdict:
    """Apply the deletion, find F2P/P2P, check flakiness, drop the F2P tests a trivial stand-in passes, and always
    restore the workspace.

    `naive` runs the whole suite instead of the predicted tests (the benchmark's reference).
    """
    clock = clock or StageClock()
    apply_deletion(sb, deletion)
    try:
        return _judge(sb, baseline, deletion, module_name, settings, naive, clock)
    finally:
        apply_deletion(sb, deletion, restore=True)


def _judge(
    sb: Sandbox,
    baseline: Baseline,
    deletion: Deletion,
    module_name: str,
    settings: SynthSettings,
    naive: bool,
    clock: StageClock,
) -> Verdict:
    test_command, timeout = settings.test_command, settings.test_timeout_s
    with clock.stage("validate: import check"):
        error = import_check(sb, baseline.packages, timeout)
    if error is not None:
        return Verdict("import_broken", detail=error)
    if naive:
        predicted: list[str] = []
        selected = None
    else:
        predicted = sorted(predicted_tests(baseline, deletion, module_name))
        others = sorted(baseline.stable - set(predicted))
        rng = random.Random(f"{settings.seed}:{deletion.mode}:{deletion.unit.key}")
        selected = predicted + sorted(rng.sample(others, min(settings.sample_others, len(others))))
    started = time.monotonic()
    with clock.stage("validate: find F2P"):
        run = run_tests(sb, test_command, selected, timeout)
    elapsed = time.monotonic() - started
    executions = run.executions
    if run.timed_out:
        return Verdict("timeout", predicted=predicted, test_executions=executions, detail=_timeout_detail(run, timeout))
    if not run.rounds and selected != []:  # no report: the deletion broke pytest, not the tests (it imports pluggy)
        detail = f"pytest itself stopped before reporting any test ({suite_error(run)})"
        return Verdict("runner_broken", predicted=predicted, test_executions=executions, detail=detail)
    considered = sorted(baseline.stable) if selected is None else [t for t in selected if t in baseline.stable]
    fail_to_pass = sorted(run.failed(considered))
    verdict = Verdict(None, fail_to_pass, sorted(baseline.stable - set(fail_to_pass)), predicted, executions)
    if not fail_to_pass:
        verdict.rejection = "no_f2p"
        return verdict
    if not verdict.pass_to_pass:
        verdict.rejection = "no_p2p"
        return verdict
    if settings.flaky_reruns:
        # Every rerun in one process, a round each: a F2P test that passes in any round is flaky.
        reruns = settings.flaky_reruns
        with clock.stage("validate: flaky reruns"):
            rerun = run_tests(sb, test_command, fail_to_pass, timeout * reruns, repeat=reruns)
        verdict.test_executions += rerun.executions
        if rerun.timed_out:
            verdict.rejection = "timeout"
            verdict.detail = _timeout_detail(rerun, timeout * reruns)
            return verdict
        if any(outcomes.get(test, False) for outcomes in rerun.rounds for test in fail_to_pass):
            verdict.rejection = "flaky"
            return verdict
    stand_in_timeout = min(timeout, max(STAND_IN_MIN_TIMEOUT_S, STAND_IN_TIMEOUT_FACTOR * elapsed))
    with clock.stage("validate: trivial stand-ins"):
        return drop_trivially_passed(sb, deletion, verdict, test_command, stand_in_timeout)
