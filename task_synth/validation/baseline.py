"""The baseline: the whole suite N times (stable-passing tests) and one run with per-test coverage."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

from sandbox import Sandbox
from sandbox.layout import WORKSPACE
from task_synth.candidates.mention_index import mention_index
from task_synth.candidates.units import Unit
from task_synth.errors import SynthError
from task_synth.repository.editable_install import EXCEPTION_LINE
from task_synth.repository.pytest_compat import dropped_doctests, project_addopts
from task_synth.repository.repo_layout import RepoLayout
from task_synth.validation.suite_runs import IMPORT_TIME, SuiteRun, coverage_map, run_tests

log = logging.getLogger(__name__)
# A SIGKILL that was not the sandbox's OOM killer (seen on an engine shared with other test runs): worth one retry.
KILLED = 137


@dataclass
class Baseline:
    """Which tests always pass, which lines each test executes, and the package names to import-check."""

    stable: set[str]
    collected: set[str]
    lines: dict[str, dict[int, set[str]]]
    packages: list[str]
    test_texts: dict[str, str]
    test_executions: int = 0
    flaky: set[str] = field(default_factory=set)
    mentions: dict[str, set[str]] = field(default_factory=dict)
    # The repository's packages that pytest itself imports (pluggy): a fork server's children would inherit the
    # modules it imported before a deletion, so that no test saw it; candidates then run in a fresh pytest each.
    runner_packages: list[str] = field(default_factory=list)

    def covering(self, unit: Unit) -> set[str]:
        """Stable tests that execute any line of the unit's body (of any part's, for a group, whose parts may sit in
        several modules)."""
        tests: set[str] = set()
        for piece in unit.pieces:
            by_line = self.lines.get(piece.path, {})
            for start, end in piece.body_lines:
                for line in range(start, end + 1):
                    tests |= by_line.get(line, set())
        return tests & self.stable

    def runs_at_import(self, unit: Unit) -> bool:
        """Whether the unit's body runs while the package is imported or the tests collected: deleting it breaks the
        import, so such a unit is tried last."""
        return any(
            IMPORT_TIME in self.lines.get(piece.path, {}).get(line, ())
            for piece in unit.pieces
            for start, end in piece.used_lines
            for line in range(start, end + 1)
        )


def suite_error(run: SuiteRun) -> str:
    """Why a run reported no test, with its exit code: the first exception pytest printed (the cause a user needs,
    such as a ModuleNotFoundError) and then what errored; a kill says so."""
    lines = [line.strip() for line in run.output_tail.splitlines() if line.strip()]
    causes = [cause for line in lines if EXCEPTION_LINE.match(cause := re.sub(r"^E\s+", "", line))]
    errored = list(dict.fromkeys(line for line in lines if line.startswith(("ERROR", "INTERNALERROR"))))
    named = causes[:1] + errored[:2] + ([f"and {len(errored) - 2} more"] if len(errored) > 2 else [])
    shown = " | ".join(named) or (lines[-1] if lines else "no output")
    killed = ""
    if run.exit_code in (137, -9):
        killed = (
            " (killed: out of memory in the sandbox)"
            if run.oom_killed
            else " (killed by SIGKILL from outside pytest, not out of memory)"
        )
    return f"exit {run.exit_code}{killed}: {shown}"


def unmeasured_package_error(lines: dict[str, dict[int, set[str]]], layout: RepoLayout, output: str) -> str | None:
    """Why no candidate can be ranked when the coverage run measured no package line under a test, or None.

    Without covering tests every unit weighs 0, so the run would make nothing and say nothing.
    """
    if any(tests for path in layout.modules for tests in lines.get(path, {}).values()):
        return None
    said = [
        line.strip()
        for line in output.splitlines()
        if "Coverage" in line or "never imported" in line or "not measured" in line
    ]
    measured = f"measured only {', '.join(sorted(lines)[:3])}" if lines else "measured no file"
    return (
        f"the tests never ran the package's code under coverage ({measured}; coverage.py: "
        f"{said[-1] if said else 'no warning'}): "
        f"check that the tests import {', '.join(layout.top_packages)} from /workspace, not from an installed copy or "
        "another "
        "name, or pass a --test-cmd that runs the tests that do"
    )


# Prints the top-level modules loaded once pytest and its config, session and collection code are imported.
_RUNNER_MODULES = (
    "import sys, pytest, _pytest.config, _pytest.main, _pytest.python\n"
    "print(' '.join(sorted({name.partition('.')[0] for name in sys.modules})))"
)


def runner_imports(sb: Sandbox, packages: list[str], timeout: float) -> list[str]:
    """The repository's top-level packages that pytest itself imports (its plugin manager pluggy, say)."""
    result = sb.exec(["python", "-c", _RUNNER_MODULES], timeout=timeout, cwd=WORKSPACE)
    return sorted(set(packages) & set(result.stdout.split())) if result.exit_code == 0 else []


def importable_packages(sb: Sandbox, packages: list[str], timeout: float) -> list[str]:
    """The packages that import before any deletion, each in a process of its own: only they are import-checked after
    one. A shim of a C extension the image does not build (PyYAML's `_yaml`) fails with or without a deletion."""
    found = []
    for name in packages:
        command = ["python", "-c", "import importlib, sys; importlib.import_module(sys.argv[1])", name]
        result = sb.exec(command, timeout=timeout, cwd=WORKSPACE)
        if result.exit_code == 0:
            found.append(name)
        else:
            said = (result.stderr.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
            log.warning("%s does not import before any deletion (%s): it is left out of the import check", name, said)
    if not found:
        raise SynthError(
            f"none of the packages {', '.join(packages)} imports in the repository image before any deletion: check "
            "`python -c 'import <package>'` there, with only the wheelhouse's dependencies installed"
        )
    return found


def run_baseline(
    sb: Sandbox, layout: RepoLayout, test_command: str, runs: int, timeout: float, max_failure_fraction: float
) -> Baseline:
    """Run the suite `runs` times plus once under coverage; raises SynthError when the suite is unusable."""
    passes: list[set[str]] = []
    collected: set[str] = set()
    executions = 0
    slowest = 0.0
    for index in range(runs):
        started = time.monotonic()
        run = run_tests(sb, test_command, None, timeout)
        if run.exit_code == KILLED and not run.outcomes and not run.oom_killed:
            log.warning("baseline run %d was killed from outside (exit %d); running it again", index + 1, run.exit_code)
            run = run_tests(sb, test_command, None, timeout)
        executions += run.executions
        if run.timed_out:
            raise SynthError(
                f"the test suite took longer than {timeout:.0f}s at baseline: raise REGROW_SYNTH_TEST_TIMEOUT_S or "
                "pass a narrower --test-cmd"
            )
        if run.exit_code == 5 or (index == 0 and not run.outcomes and run.exit_code == 0):
            doctests = (
                (
                    " (doctests do not count: its pytest config asks for them, but the agent edits the files they"
                    " live in)"
                )
                if dropped_doctests(project_addopts(layout.root))
                else ""
            )
            raise SynthError(
                f"`{test_command}` collected no tests in {layout.root.name}{doctests}: point --test-cmd at "
                "the tests, or pick a repository that has some"
            )
        if not run.outcomes:
            raise SynthError(
                f"the test suite does not run at baseline ({suite_error(run)}): fix the suite or pass a working "
                "--test-cmd"
            )
        collected |= set(run.outcomes)
        passes.append({test for test, passed in run.outcomes.items() if passed})
        took = time.monotonic() - started
        slowest = max(slowest, took)
        # a suite of minutes would otherwise show nothing here for a quarter of an hour
        log.info(
            "baseline run %d/%d: %d tests, %d passed, %.0fs",
            index + 1,
            runs,
            len(run.outcomes),
            len(passes[-1]),
            took,
        )
    stable = set.intersection(*passes)
    failing = len(collected - stable)
    if not stable or failing > max_failure_fraction * len(collected):
        raise SynthError(
            f"the test suite fails at baseline ({failing} of {len(collected)} tests are not always passing): "
            "fix the suite, or pass a --test-cmd that selects its passing part"
        )
    log.info("baseline: the coverage run (every line each test runs; a few times slower than a plain run)")
    run, lines = coverage_map(sb, test_command, layout.top_packages, timeout)
    executions += run.executions
    if run.timed_out:
        raise SynthError(
            f"the test suite under coverage took longer than {timeout:.0f}s (a plain run took {slowest:.0f}s; tracing "
            "every line of every test slows it): raise REGROW_SYNTH_TEST_TIMEOUT_S to a few times the plain run, or "
            "pass a --test-cmd that selects part of the suite"
        )
    unmeasured = unmeasured_package_error(lines, layout, run.output_tail)
    if unmeasured:
        raise SynthError(unmeasured)
    test_texts = layout.test_texts
    log.info("baseline: %d tests, %d stable, %d files with coverage", len(collected), len(stable), len(lines))
    packages = importable_packages(sb, layout.top_packages, timeout)
    imported = runner_imports(sb, layout.top_packages, timeout)
    if imported:
        log.warning(
            "pytest itself imports %s: each candidate's tests run in a fresh pytest, and a deletion in code pytest "
            "runs breaks the test runner (such candidates are rejected as runner_broken); the others make tasks",
            ", ".join(imported),
        )
    flaky = set.union(*passes) - stable
    mentions = mention_index(test_texts)
    return Baseline(stable, collected, lines, packages, test_texts, executions, flaky, mentions, imported)
