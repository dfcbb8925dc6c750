"""A deletion that breaks pytest itself (the repository is a package pytest imports, such as pluggy) is rejected as
`runner_broken`, not turned into a task whose FAIL_TO_PASS is every test run; and the run says at the start that
pytest imports the package (no Docker)."""

from pathlib import Path
from types import SimpleNamespace

from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.repository.repo_layout import read_layout
from task_synth.settings import SynthSettings
from task_synth.validation.baseline import Baseline, runner_imports
from task_synth.validation.verdict import validate
from tests.task_synth.recorder_runs import LocalSandbox

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
TESTS = {f"tests/test_mathops.py::test_{name}" for name in ("gcd", "lcm", "median", "primes")}


class CrashingPytest:
    """A sandbox where the package imports, but pytest dies before it reports anything."""

    def exec(self, command, timeout, cwd=None, env=None):
        crashed = command[0] == "sh" and "pytest" in command[2]
        output = "INTERNALERROR> AttributeError: 'HookCaller' object has no attribute 'call_historic'"
        return SimpleNamespace(
            timed_out=False, exit_code=3 if crashed else 0, stdout=output if crashed else "", stderr=""
        )

    def write_file(self, path, data):
        pass

    def read_file(self, path):
        raise FileNotFoundError(path)


def test_a_run_that_reports_no_test_is_the_runner_broken_not_every_test_failing():
    layout = read_layout(MINILIB)
    unit = next(u for u in enumerate_units(layout) if u.qualname == "gcd")
    deletion = delete_unit(layout, unit, "stub")
    baseline = Baseline(set(TESTS), set(TESTS), {}, ["minilib"], {})
    verdict = validate(CrashingPytest(), baseline, deletion, "minilib.mathops", SynthSettings())
    assert verdict.rejection == "runner_broken" and verdict.fail_to_pass == []
    assert "pytest itself stopped before reporting any test" in verdict.detail and "call_historic" in verdict.detail


def test_the_packages_pytest_itself_imports_are_found(tmp_path):
    assert runner_imports(LocalSandbox(tmp_path), ["pluggy", "iniconfig", "minilib"], 60) == ["iniconfig", "pluggy"]


def test_a_package_that_does_not_import_before_any_deletion_is_left_out_of_the_import_check(tmp_path):
    """PyYAML's `_yaml` shims a C extension its image does not build: every candidate failed the import check."""
    import pytest

    from task_synth.errors import SynthError
    from task_synth.validation.baseline import importable_packages

    (tmp_path / "fine").mkdir()
    (tmp_path / "fine" / "__init__.py").write_text("")
    (tmp_path / "_shim").mkdir()
    (tmp_path / "_shim" / "__init__.py").write_text("from ._missing_extension import *\n")
    assert importable_packages(LocalSandbox(tmp_path), ["_shim", "fine"], 60) == ["fine"]
    with pytest.raises(SynthError, match="none of the packages _shim imports"):
        importable_packages(LocalSandbox(tmp_path), ["_shim"], 60)


def test_an_oracle_run_that_wrote_no_report_says_how_pytest_stopped_not_that_every_test_failed():
    from task_synth.validation.suite_runs import SuiteRun
    from task_synth.validation.task_checks import oracle_failure

    tests = [f"tests/test_x.py::test_{n}" for n in range(415)]
    died = SuiteRun(exit_code=137, output_tail="........................", oom_killed=True)
    detail = oracle_failure(died, died.failed(tests))
    assert "415 tests fail" not in detail
    assert detail.startswith("pytest stopped before reporting any test with the solution")
    assert "exit 137 (killed: out of memory in the sandbox)" in detail

    reported = SuiteRun(rounds=[{tests[0]: False, tests[1]: True}], outcomes={tests[0]: False, tests[1]: True})
    assert oracle_failure(reported, reported.failed(tests[:2])).startswith("1 tests fail with the solution")
