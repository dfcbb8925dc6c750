"""Validating one deletion in a sandbox: predicted tests plus a random check sample, F2P/P2P, flakiness."""

from __future__ import annotations

import logging
import random
import re
import shlex
from dataclasses import dataclass, field

from sandbox import Sandbox
from task_synth.baseline import Baseline
from task_synth.candidates import Unit
from task_synth.deletion import Deletion
from task_synth.test_runs import run_tests

log = logging.getLogger(__name__)
REJECTIONS = ("no_f2p", "no_p2p", "flaky", "import_broken", "leak", "oracle_failed", "timeout")


@dataclass
class Verdict:
    """What validating one deletion found; `rejection` is None for a valid task."""

    rejection: str | None
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    predicted: list[str] = field(default_factory=list)
    test_executions: int = 0
    detail: str = ""


def predicted_tests(baseline: Baseline, unit: Unit, deletion: Deletion) -> set[str]:
    """Stable tests that execute the unit's body, plus every test in a test file that names what left at import."""
    predicted = baseline.covering(unit)
    if deletion.mode != "stub":
        names = {unit.qualname.split(".")[-1], *unit.helpers} if unit.kind != "module" else {unit.qualname.rsplit(".", 1)[-1]}
        pattern = re.compile(r"\b(" + "|".join(re.escape(name) for name in names) + r")\b")
        files = {path for path, text in baseline.test_texts.items() if pattern.search(text)}
        predicted |= {test for test in baseline.stable if test.split("::")[0] in files}
    return predicted


def apply_deletion(sb: Sandbox, deletion: Deletion, restore: bool = False) -> None:
    """Write the deleted state of the changed files into /workspace (or their originals back with restore=True)."""
    gone = []
    for path, text in deletion.changed.items():
        content = deletion.original[path] if restore else text
        if content is None:
            gone.append(f"/workspace/{path}")
        else:
            sb.write_file(f"/workspace/{path}", content)
    if gone:
        sb.exec(f"rm -f {' '.join(shlex.quote(path) for path in gone)}", timeout=30)


def import_check(sb: Sandbox, packages: list[str], timeout: float) -> str | None:
    """None when every top-level package imports, else the error's last line."""
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)"
    result = sb.exec(["python", "-c", code, *packages], timeout=timeout, cwd="/workspace")
    if result.exit_code == 0:
        return None
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {result.exit_code}"


def validate(
    sb: Sandbox,
    baseline: Baseline,
    deletion: Deletion,
    test_command: str,
    timeout: float,
    sample_others: int,
    flaky_reruns: int,
    seed: int,
    naive: bool = False,
) -> Verdict:
    """Apply the deletion, find F2P/P2P, check flakiness, and always restore the workspace."""
    apply_deletion(sb, deletion)
    try:
        return _judge(sb, baseline, deletion, test_command, timeout, sample_others, flaky_reruns, seed, naive)
    finally:
        apply_deletion(sb, deletion, restore=True)


def _judge(sb, baseline: Baseline, deletion: Deletion, test_command, timeout, sample_others, flaky_reruns, seed, naive) -> Verdict:
    error = import_check(sb, baseline.packages, timeout)
    if error is not None:
        return Verdict("import_broken", detail=error)
    if naive:
        predicted: list[str] = []
        selected = None
    else:
        predicted = sorted(predicted_tests(baseline, deletion.unit, deletion))
        others = sorted(baseline.stable - set(predicted))
        rng = random.Random(f"{seed}:{deletion.mode}:{deletion.unit.key}")
        selected = predicted + sorted(rng.sample(others, min(sample_others, len(others))))
    run = run_tests(sb, test_command, selected, timeout)
    executions = run.executions
    if run.timed_out:
        return Verdict("timeout", predicted=predicted, test_executions=executions)
    considered = sorted(baseline.stable) if selected is None else [t for t in selected if t in baseline.stable]
    fail_to_pass = sorted(run.failed(considered))
    verdict = Verdict(None, fail_to_pass, sorted(baseline.stable - set(fail_to_pass)), predicted, executions)
    if not fail_to_pass:
        verdict.rejection = "no_f2p"
        return verdict
    if not verdict.pass_to_pass:
        verdict.rejection = "no_p2p"
        return verdict
    for _ in range(flaky_reruns):
        rerun = run_tests(sb, test_command, fail_to_pass, timeout)
        verdict.test_executions += rerun.executions
        if rerun.timed_out:
            verdict.rejection = "timeout"
            return verdict
        if rerun.failed(fail_to_pass) != set(fail_to_pass):
            verdict.rejection = "flaky"
            return verdict
    return verdict
