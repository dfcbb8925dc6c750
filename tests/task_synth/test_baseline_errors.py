"""A baseline that cannot lead to any task says why, with the real error and the remedy."""

from task_synth.repository.repo_layout import read_layout
from task_synth.validation import suite_runs
from task_synth.validation.baseline import suite_error, unmeasured_package_error


def test_a_baseline_whose_coverage_missed_the_package_says_why(tmp_path):
    (tmp_path / "jaraco" / "functools").mkdir(parents=True)
    (tmp_path / "jaraco" / "functools" / "__init__.py").write_text("def f():\n    return 1\n")
    layout = read_layout(tmp_path)
    # What the run measured when the namespace was dropped from the name: the stdlib module of the same name.
    warning = "CoverageWarning: Module functools was previously imported, but not measured (module-not-measured)"
    error = unmeasured_package_error(
        {"/usr/lib/python3.11/functools.py": {3: {"test_functools.py::test_a"}}}, layout, warning
    )
    assert "measured only /usr/lib/python3.11/functools.py" in error and warning in error
    assert "import jaraco.functools from /workspace" in error
    assert (
        unmeasured_package_error({"jaraco/functools/__init__.py": {2: {"test_functools.py::test_a"}}}, layout, "")
        is None
    )


def test_a_suite_that_reports_no_test_shows_pytests_error_and_exit_code():
    output = (
        "ImportError while loading conftest '/workspace/conftest.py'.\nE   ModuleNotFoundError: No module named "
        "'yaml'\n"
    )
    assert (
        suite_error(suite_runs.SuiteRun(exit_code=4, output_tail=output))
        == "exit 4: ModuleNotFoundError: No module named 'yaml'"
    )
    assert suite_error(suite_runs.SuiteRun(exit_code=137, output_tail="....", oom_killed=True)) == (
        "exit 137 (killed: out of memory in the sandbox): ...."
    )
    killed = suite_runs.SuiteRun(exit_code=137, output_tail="....")
    assert "from outside pytest, not out of memory" in suite_error(killed)


def test_a_suite_whose_collection_errors_names_the_first_cause_not_only_the_files():
    """Before, the last three error lines were shown: on a checkout whose generated version file was missing, the
    files that errored and not the ModuleNotFoundError that said why."""
    sections = [
        f"_ ERROR collecting tests/test_{name}.py _\ntests/test_{name}.py:1: in <module>\n    import pkg\n"
        "pkg/__init__.py:3: in <module>\n    from pkg._version import version\n"
        "E   ModuleNotFoundError: No module named 'pkg._version'"
        for name in ("macos", "main", "unix", "windows")
    ]
    summary = "".join(f"ERROR tests/test_{name}.py\n" for name in ("macos", "main", "unix", "windows"))
    output = "\n".join(sections) + "\n=== short test summary info ===\n" + summary + "4 errors in 0.31s\n"
    said = suite_error(suite_runs.SuiteRun(exit_code=2, output_tail=output))
    assert said == (
        "exit 2: ModuleNotFoundError: No module named 'pkg._version' | ERROR tests/test_macos.py | "
        "ERROR tests/test_main.py | and 2 more"
    )


def test_a_baseline_run_killed_from_outside_is_run_once_more(tmp_path, monkeypatch):
    import task_synth.validation.baseline as baseline

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def f():\n    return 1\n")
    (tmp_path / "test_pkg.py").write_text("")
    runs = [suite_runs.SuiteRun(exit_code=137, output_tail="....")] + [
        suite_runs.SuiteRun(outcomes={"test_pkg.py::test_f": True}, executions=1)
    ] * 3
    monkeypatch.setattr(baseline, "run_tests", lambda *args, **kwargs: runs.pop(0))
    lines = {"pkg/__init__.py": {2: {"test_pkg.py::test_f"}}}
    monkeypatch.setattr(baseline, "coverage_map", lambda *args: (suite_runs.SuiteRun(executions=1), lines))
    monkeypatch.setattr(baseline, "importable_packages", lambda sb, packages, timeout: packages)
    monkeypatch.setattr(baseline, "runner_imports", lambda sb, packages, timeout: [])
    result = baseline.run_baseline(None, read_layout(tmp_path), "pytest", runs=3, timeout=60, max_failure_fraction=0.2)
    assert result.stable == {"test_pkg.py::test_f"} and not runs


def test_a_suite_that_outlasts_the_timeout_only_under_coverage_says_so_at_the_start(monkeypatch, tmp_path):
    import pytest

    from task_synth.errors import SynthError
    from task_synth.validation import baseline

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def f():\n    return 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_f.py").write_text("from pkg import f\n\n\ndef test_f():\n    assert f() == 1\n")
    plain = suite_runs.SuiteRun(outcomes={"tests/test_f.py::test_f": True}, executions=1)
    monkeypatch.setattr(baseline, "run_tests", lambda *args, **kwargs: plain)
    traced = suite_runs.SuiteRun(timed_out=True, exit_code=124)
    monkeypatch.setattr(baseline, "coverage_map", lambda *args, **kwargs: (traced, {}))
    with pytest.raises(SynthError, match="under coverage took longer than 600s") as raised:
        baseline.run_baseline(None, read_layout(tmp_path), "python -m pytest", 3, 600, 0.1)
    assert "REGROW_SYNTH_TEST_TIMEOUT_S" in str(raised.value) and "never ran the package" not in str(raised.value)
