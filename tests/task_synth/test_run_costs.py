"""What a test run costs on a big suite: the coverage map is read as context indices, not from `coverage json
--show-contexts` (785 MB on tomlkit's suite), and a failure costs one line of output, not a traceback."""

import json
import subprocess
import sys

import coverage

from task_synth.validation.suite_runs import COVERAGE_LINES_SOURCE, IMPORT_TIME, coverage_lines

MODULE = "def double(x):\n    y = x * 2\n    return y\n\n\ndef half(x):\n    return x / 2\n"


def test_each_line_maps_to_the_tests_that_ran_it(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    data_file = tmp_path / "coverage.data"
    measured = coverage.Coverage(data_file=str(data_file), source_pkgs=["pkg"], config_file=False)
    measured.set_option("run:relative_files", True)
    measured.start()
    import pkg

    for node_id, call in (
        ("tests/test_pkg.py::test_double", lambda: pkg.double(2)),
        ("tests/test_pkg.py::test_both[a b]", lambda: (pkg.double(1), pkg.half(1))),
    ):
        measured.switch_context(node_id)
        call()
    measured.switch_context("")
    measured.stop()
    measured.save()
    script = tmp_path / "lines.py"
    script.write_text(COVERAGE_LINES_SOURCE.read_text())
    subprocess.run([sys.executable, str(script), str(data_file), str(tmp_path / "out.json")], check=True)
    lines = coverage_lines(json.loads((tmp_path / "out.json").read_text()))
    assert lines["pkg/__init__.py"][2] == {"tests/test_pkg.py::test_double", "tests/test_pkg.py::test_both[a b]"}
    assert lines["pkg/__init__.py"][7] == {"tests/test_pkg.py::test_both[a b]"}
    assert lines["pkg/__init__.py"][1] == {IMPORT_TIME}  # the def ran at import, outside any test
    sys.modules.pop("pkg", None)


class RecordingSandbox:
    """Just enough of a Sandbox to see the command a test run sends."""

    def __init__(self):
        self.commands = []

    def exec(self, command, timeout, cwd=None, env=None):
        from types import SimpleNamespace

        self.commands.append(command)
        return SimpleNamespace(timed_out=False, exit_code=1, stdout="", stderr="")

    def write_file(self, path, data):
        self.commands.append(("write", path))

    def read_file(self, path):
        return b'[{"tests/test_a.py::test_x": false}]'


def test_test_runs_print_one_line_per_failure():
    # Rendering a long traceback per failure took minutes when a deletion failed thousands of tests.
    from task_synth.validation.suite_runs import run_tests

    sb = RecordingSandbox()
    run = run_tests(sb, "python -m pytest", ["tests/test_a.py::test_x"], timeout=60)
    assert run.outcomes == {"tests/test_a.py::test_x": False}
    script = sb.commands[-1][2]
    assert "--tb=line" in script and "-p regrow_report" in script


def test_the_coverage_settings_name_each_package_apart(tmp_path):
    # toolz ships two packages, tlz and toolz: "tlz toolz" was read as one name, and nothing was measured.
    from task_synth.validation.suite_runs import coverage_rc

    (tmp_path / "coverage.rc").write_text(coverage_rc(["tlz", "toolz"]))
    settings = coverage.Coverage(config_file=str(tmp_path / "coverage.rc"))
    assert settings.get_option("run:source_pkgs") == ["tlz", "toolz"]
