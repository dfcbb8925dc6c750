"""What a repository needs to install editable: the backend's editable requirements, and pip's real error when it
fails."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from task_synth.errors import SynthError
from task_synth.repository.editable_install import pip_error_lines
from task_synth.repository.wheelhouse import build_system, build_wheelhouse, editable_requirements, pkg_resources_cap

# An in-tree backend that asks for an extra package only to build editable, as hatchling asks for `editables`.
IN_TREE_BACKEND = """
def get_requires_for_build_editable(config_settings=None):
    return ["editables>=0.3"]
"""

# pip 26's stderr for `pip install --no-build-isolation -e` of a hatchling project whose image lacks `editables`.
HATCHLING_WITHOUT_EDITABLES = """\
  error: subprocess-exited-with-error
  
  × Preparing editable metadata (pyproject.toml) did not run successfully.
  │ exit code: 1
  ╰─> [29 lines of output]
      Traceback (most recent call last):
        File "/opt/venv/lib/python3.11/site-packages/pip/_vendor/pyproject_hooks/_in_process/_in_process.py", line 167, in prepare_metadata_for_build_editable
          hook = backend.prepare_metadata_for_build_editable
                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
      AttributeError: module 'hatchling.build' has no attribute 'prepare_metadata_for_build_editable'
      
      During handling of the above exception, another exception occurred:
      
      Traceback (most recent call last):
        File "/opt/venv/lib/python3.11/site-packages/hatchling/builders/wheel.py", line 550, in build_editable_detection
          from editables import EditableProject
      ModuleNotFoundError: No module named 'editables'
      [end of output]
  
  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed

× Encountered error while generating package metadata.
╰─> See above for output.

note: This is an issue with the package mentioned above, not pip.
hint: See above for details.
"""


def _project(root: Path, build_system_table: str) -> Path:
    (root / "src" / "tiny").mkdir(parents=True)
    (root / "src" / "tiny" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(f'{build_system_table}\n[project]\nname = "tiny"\nversion = "0.1"\n')
    return root


def test_the_backend_is_asked_what_an_editable_build_needs(tmp_path):
    root = _project(
        tmp_path / "tiny", '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    (root / "backend.py").write_text(IN_TREE_BACKEND)
    assert editable_requirements(root, tmp_path / "no-wheels") == ["editables>=0.3"]


def test_the_backends_warnings_are_logged_not_printed(tmp_path, caplog, capfd):
    # setuptools warns of every old sdist's license classifiers; pyproject_hooks re-raises them in our process, where
    # Python printed them over `regrow synth`'s progress.
    root = _project(
        tmp_path / "tiny", '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    (root / "backend.py").write_text(
        "import warnings\n\ndef get_requires_for_build_editable(config_settings=None):\n"
        "    warnings.warn('License classifiers are deprecated.')\n    return []\n"
    )
    with caplog.at_level("DEBUG", logger="task_synth.repository.wheelhouse"):
        assert editable_requirements(root, tmp_path / "no-wheels") == []
    assert "License classifiers" not in capfd.readouterr().err
    assert "License classifiers are deprecated." in caplog.text


def test_a_project_without_a_build_system_uses_setuptools_legacy_backend(tmp_path):
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='tiny')\n")
    system = build_system(tmp_path)
    assert (system.backend, system.requires) == ("setuptools.build_meta:__legacy__", ["setuptools", "wheel"])


@pytest.mark.parametrize(
    ("requires", "capped"),
    [(["setuptools>=61.2"], True), (["setuptools>=82", "wheel"], False), (["hatchling"], False)],
)
def test_a_setuptools_build_keeps_pkg_resources_unless_it_asks_for_82_or_later(requires, capped):
    # wcwidth 0.2.13: its tox deps pin pbr 5.11, a setuptools plugin that imports pkg_resources, gone in setuptools 82.
    assert (pkg_resources_cap(requires) == ["setuptools<82"]) is capped


def test_the_pkg_resources_cap_yields_to_wheels_that_have_no_setuptools_below_82(tmp_path, monkeypatch):
    import task_synth.repository.wheelhouse as wheelhouse

    # The compose stack's synth resolves offline-like from its own wheels, which hold setuptools 84 only.
    root = _project(tmp_path / "tiny", '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "x"\n')
    calls = []

    def pip_wheel(root, target, arguments, *rest):
        calls.append(arguments)
        if "setuptools<82" in arguments:
            raise SynthError("Cannot install setuptools<82 and setuptools>=68")
        target.mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(wheelhouse, "_pip_wheel", pip_wheel)
    monkeypatch.setattr(wheelhouse, "editable_requirements", lambda root, wheels: [])
    build_wheelhouse(root, tmp_path / "cache")
    assert ["setuptools<82" in arguments for arguments in calls] == [True, False]
    assert build_wheelhouse(root, tmp_path / "offline", offline=True) and "setuptools<82" not in calls[-1]


def test_a_backend_that_fails_names_itself_and_its_error(tmp_path):
    root = _project(
        tmp_path / "tiny", '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    (root / "backend.py").write_text(
        "def get_requires_for_build_editable(config_settings=None):\n    raise LookupError('no version')\n"
    )
    with pytest.raises(
        SynthError, match=r"backend backend of tiny .*LookupError: no version.*check its build configuration"
    ):
        editable_requirements(root, tmp_path / "no-wheels")


def test_pip_error_shows_the_lines_that_name_the_error():
    assert pip_error_lines(HATCHLING_WITHOUT_EDITABLES) == [
        "× Preparing editable metadata (pyproject.toml) did not run successfully.",
        "ModuleNotFoundError: No module named 'editables'",
        "error: metadata-generation-failed",
        "× Encountered error while generating package metadata.",
    ]


def test_pip_error_is_found_in_a_docker_build_log_that_colours_stderr():
    # Two stream chunks of a failed repo image build, joined as repo_image does, then the engine's own message.
    log = (
        "\x1b[91mERROR: Could not find a version that satisfies the requirement tiny>=2.7 (from freezer) (from "
        "versions: none)\n\x1b[0m"
        "\x1b[91mERROR: No matching distribution found for tiny>=2.7\n\x1b[0m"
        "\nThe command '/bin/sh -c python3 -m venv /opt/venv' returned a non-zero code: 1"
    )
    assert pip_error_lines(log) == [
        "ERROR: Could not find a version that satisfies the requirement tiny>=2.7 (from freezer) (from versions: none)",
        "ERROR: No matching distribution found for tiny>=2.7",
    ]


def test_pip_error_keeps_pips_own_errors_and_falls_back_to_the_last_line():
    no_project = (
        "ERROR: file:///workspace does not appear to be a Python project: neither 'setup.py' nor "
        "'pyproject.toml' found.\n"
    )
    assert pip_error_lines(no_project) == [no_project.strip()]
    assert pip_error_lines("something odd\nKilled\n") == ["Killed"]
    assert pip_error_lines("") == ["no output"]


@pytest.mark.network
@pytest.mark.skipif(
    os.environ.get("REGROW_TEST_NETWORK") != "1", reason="fetches hatchling from PyPI; set REGROW_TEST_NETWORK=1"
)
def test_a_hatchling_wheelhouse_holds_editables_and_installs_editable_offline(tmp_path):
    root = _project(tmp_path / "tiny", '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n')
    wheelhouse = build_wheelhouse(root, tmp_path / "cache")
    assert any(wheel.name.startswith("editables-") for wheel in wheelhouse.glob("*.whl"))
    # As the repo image does it: everything from the wheelhouse, then the editable install with no network.
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    pip = [str(tmp_path / "venv" / "bin" / "pip"), "install", "-q", "--no-index", f"--find-links={wheelhouse}"]
    subprocess.run([*pip, *map(str, wheelhouse.glob("*.whl"))], check=True)
    installed = subprocess.run(
        [*pip, "--no-deps", "--no-build-isolation", "-e", str(root)], capture_output=True, text=True
    )
    assert installed.returncode == 0, pip_error_lines(installed.stderr)


def test_editable_requirements_are_resolved_with_the_build_table_so_versions_cannot_conflict(tmp_path, monkeypatch):
    import task_synth.repository.wheelhouse as wheelhouse

    # python-dateutil: the build table pins setuptools_scm<8, setup.cfg's setup_requires names it unpinned.
    root = _project(
        tmp_path / "tiny",
        '[build-system]\nrequires = ["setuptools", "setuptools_scm<8.0"]\nbuild-backend = "setuptools.build_meta"\n',
    )
    calls = []
    monkeypatch.setattr(
        wheelhouse,
        "_pip_wheel",
        lambda root, target, arguments, *rest: (target.mkdir(parents=True, exist_ok=True), calls.append(arguments)),
    )
    monkeypatch.setattr(wheelhouse, "editable_requirements", lambda root, wheels: ["setuptools_scm"])
    build_wheelhouse(root, tmp_path / "cache")
    assert calls[-1] == ["setuptools_scm", "setuptools", "setuptools_scm<8.0", "setuptools<82"]


class _InstallThatDies:
    """A sandbox whose editable install is killed with no output, as under memory or engine trouble."""

    def import_tree(self, path, archive):
        pass

    def __init__(self):
        self.install_env = None

    def exec(self, command, timeout, cwd=None, env=None):
        from sandbox import ExecResult

        killed = command.startswith("pip install")
        self.install_env = env if killed else self.install_env
        return ExecResult(137 if killed else 0, "", "", timed_out=False, truncated=False, duration_s=41.6)


def test_an_install_that_ends_with_no_output_says_how_it_ended(tmp_path):
    from task_synth.repository.editable_install import install_workspace

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\nversion = '1'\n")
    with pytest.raises(SynthError, match=r"does not install editable in its image \(no output; exit 137 after 42 s\)"):
        install_workspace(_InstallThatDies(), tmp_path, 300)


def test_a_clones_install_is_told_its_version_where_its_backend_would_read_git(tmp_path):
    from task_synth.repository.editable_install import install_workspace

    (tmp_path / "pyproject.toml").write_text("[build-system]\nrequires = ['setuptools_scm']\n")
    sandbox = _InstallThatDies()
    with pytest.raises(SynthError):
        install_workspace(sandbox, tmp_path, 300, scm_version="2.1")
    assert sandbox.install_env["SETUPTOOLS_SCM_PRETEND_VERSION"] == "2.1"
