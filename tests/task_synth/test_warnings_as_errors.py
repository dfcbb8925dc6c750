"""A suite that turns every warning into an error (`filterwarnings = error`) runs under regrow's instrumentation as in
a plain venv: coverage with per-test contexts, the outcome report and the call recorder add no warning of their own
(before: coverage's "Module other was never imported" failed the run after every test had passed)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from task_synth.validation.call_runs import RECORDER, RECORDER_FILES
from task_synth.validation.suite_runs import (
    CONTEXT_PLUGIN_SOURCE,
    COVERAGE_DATA,
    COVERAGE_LINES_SOURCE,
    REPORT_PLUGIN_NAME,
    REPORT_PLUGIN_SOURCE,
    coverage_rc,
)

FILES = {
    "pkg/__init__.py": "def double(x):\n    return 2 * x\n",
    "other/__init__.py": "",  # a second top-level package that no test imports
    "tests/test_double.py": "from pkg import double\n\n\ndef test_double():\n    assert double(2) == 4\n",
    "pytest.ini": "[pytest]\nfilterwarnings =\n    error\n",
}


def _project(root: Path) -> Path:
    for path, text in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    plugins = root / "plugins"
    plugins.mkdir()
    (plugins / "regrow_test_context.py").write_text(CONTEXT_PLUGIN_SOURCE.read_text())
    (plugins / f"{REPORT_PLUGIN_NAME}.py").write_text(REPORT_PLUGIN_SOURCE.read_text())
    for name, source in RECORDER_FILES.items():
        (plugins / name).write_text(source.read_text())
    (root / "coverage.rc").write_text(coverage_rc(["pkg", "other"]).replace(COVERAGE_DATA, str(root / "coverage.data")))
    return root


def _pytest(root: Path, *plugins: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "PYTHONPATH": f"{root / 'plugins'}{os.pathsep}{root}",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # the suite's own plugins only, as in its plain venv
        "PYTEST_ADDOPTS": "",
        **env,
    }
    loaded = [word for plugin in plugins for word in ("-p", plugin)]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *loaded, "tests"]
    return subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True, timeout=120)


def test_coverage_with_test_contexts_and_the_report_leave_a_warnings_as_errors_suite_passing(tmp_path):
    root = _project(tmp_path)
    data, rc = root / "coverage.data", root / "coverage.rc"
    run = _pytest(
        root,
        "regrow_test_context",
        REPORT_PLUGIN_NAME,
        REGROW_COVERAGE_RC=str(rc),
        REGROW_REPORT_OUT=str(root / "report.json"),
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert json.loads((root / "report.json").read_text()) == [{"tests/test_double.py::test_double": True}]
    lines = root / "lines.json"
    (root / "lines.py").write_text(COVERAGE_LINES_SOURCE.read_text())
    subprocess.run([sys.executable, str(root / "lines.py"), str(data), str(lines)], check=True, cwd=root)
    measured = json.loads(lines.read_text())
    assert "tests/test_double.py::test_double" in measured["contexts"]


def test_the_call_recorder_leaves_a_warnings_as_errors_suite_passing(tmp_path):
    root = _project(tmp_path)
    config = {"functions": {"pkg": ["double"]}, "library_files": [str(root / "pkg" / "__init__.py")], "reads": []}
    (root / "io.json").write_text(json.dumps(config))
    out = root / "calls.json"
    run = _pytest(root, RECORDER, REGROW_IO_CONFIG=str(root / "io.json"), REGROW_IO_OUT=str(out))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert [(call["qualname"], call["args"], call["result"]) for call in json.loads(out.read_text())] == [
        ("double", "(2,)", "4")
    ]
