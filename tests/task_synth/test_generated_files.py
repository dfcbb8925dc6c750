"""Files the build writes into the source tree (a setuptools-scm, hatch-vcs or versioneer `_version.py`, which git
ignores) are copied from the editable install into every workspace, and are never deleted."""

from dataclasses import replace
from pathlib import Path

import pytest

from task_synth.candidates.units import enumerate_units
from task_synth.repository.generated_files import declared_version_files, generated_paths
from task_synth.repository.repo_layout import read_layout
from tests.task_synth.written_repos import committed_clone, prepared_clone
from tests.task_synth.written_repos import write_files as _write


def test_the_version_file_each_tool_declares_is_found(tmp_path):
    scm = _write(tmp_path / "scm", {"pyproject.toml": '[tool.setuptools_scm]\nversion_file = "src/a/_version.py"\n'})
    old_scm = _write(tmp_path / "old", {"pyproject.toml": '[tool.setuptools_scm]\nwrite_to = "a/version.py"\n'})
    setup_py = _write(tmp_path / "py", {"setup.py": 'setup(use_scm_version={"write_to": "a/_v.py"})\n'})
    hatch = _write(
        tmp_path / "hatch", {"pyproject.toml": '[tool.hatch.build.hooks.vcs]\nversion-file = "src/a/version.py"\n'}
    )
    versioneer_cfg = _write(
        tmp_path / "cfg", {"setup.cfg": "[versioneer]\nVCS = git\nversionfile_source = src/a/_version.py\n"}
    )
    versioneer_toml = _write(
        tmp_path / "toml", {"pyproject.toml": '[tool.versioneer]\nversionfile_source = "a/_version.py"\n'}
    )
    assert declared_version_files(scm) == {"src/a/_version.py"}
    assert declared_version_files(old_scm) == {"a/version.py"}
    assert declared_version_files(setup_py) == {"a/_v.py"}
    assert declared_version_files(hatch) == {"src/a/version.py"}
    assert declared_version_files(versioneer_cfg) == {"src/a/_version.py"}
    assert declared_version_files(versioneer_toml) == {"a/_version.py"}
    assert declared_version_files(_write(tmp_path / "none", {"pyproject.toml": "[project]\nname = 'a'\n"})) == set()


def test_only_files_the_install_wrote_beside_the_package_and_the_checkout_lacks_are_copied(tmp_path):
    root = _write(tmp_path, {"src/pkg/__init__.py": "", "src/pkg/core.py": "", "tests/test_core.py": ""})
    created = [
        "src/pkg/_version.py",  # setuptools-scm's version file
        "src/pkg/core.py",  # rewritten, but the checkout's copy stays
        "src/pkg.egg-info/PKG-INFO",  # metadata
        "src/pkg/__pycache__/core.cpython-311.pyc",
        "build/lib/pkg/core.py",
        "notes.txt",  # not beside the package, not a declared version file
    ]
    assert generated_paths(created, read_layout(root)) == ["src/pkg/_version.py"]


def test_a_generated_version_file_is_never_a_deletion_candidate(tmp_path):
    # versioneer's _version.py is in the repository (`versioneer install` writes it), full of functions.
    root = _write(
        tmp_path,
        {
            "setup.cfg": "[versioneer]\nversionfile_source = pkg/_version.py\n",
            "pkg/__init__.py": "from pkg._version import get_versions\n",
            "pkg/_version.py": "def get_versions():\n    return {'version': '1.0'}\n",
            "pkg/core.py": "def double(x):\n    return 2 * x\n",
        },
    )
    layout = read_layout(root)
    assert "pkg/_version.py" in {unit.path for unit in enumerate_units(layout)}  # unmarked, it would be deleted
    marked = replace(layout, generated=frozenset(declared_version_files(root)))
    assert {unit.path for unit in enumerate_units(marked)} == {"pkg/core.py"}


# A package whose build writes its version file into the source tree, as setuptools-scm's `version_file` does; the
# image's wheelhouse has no setuptools-scm, so an in-tree backend around plain setuptools writes it.
VERLIB = {
    "pyproject.toml": """\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "version_backend"
        backend-path = ["_build"]

        [project]
        name = "verlib"
        version = "1.4.0"
        requires-python = ">=3.10"

        [project.optional-dependencies]
        test = ["pytest>=7"]

        [tool.setuptools.packages.find]
        where = ["src"]
        """,
    "_build/version_backend.py": """\
        from pathlib import Path

        from setuptools import build_meta
        from setuptools.build_meta import *  # noqa: F403


        VERSION_FILE = '''version = "1.4.0"


        def version_tuple():
            major, minor, patch = version.split(".")
            numbers = (int(major), int(minor), int(patch))
            return numbers
        '''


        def _write_version():
            Path("src/verlib/_version.py").write_text(VERSION_FILE)


        def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
            _write_version()
            return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)


        def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
            _write_version()
            return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)
        """,
    ".gitignore": "src/verlib/_version.py\n",
    "src/verlib/__init__.py": "from verlib._version import version, version_tuple\nfrom verlib.words import greet\n",
    "src/verlib/words.py": """\
        def greet(name, excited=False):
            words = ["hello", name]
            text = " ".join(words)
            return text + "!" if excited else text
        """,
    "tests/test_verlib.py": """\
        import verlib


        def test_greet():
            assert verlib.greet("ada") == "hello ada"


        def test_greet_excited():
            assert verlib.greet("ada", excited=True) == "hello ada!"


        def test_version():
            assert verlib.version == "1.4.0" and verlib.version_tuple() == (1, 4, 0)
        """,
}


@pytest.fixture
def verlib_clone(tmp_path) -> Path:
    """A git repository of VERLIB, as a clone has it: no _version.py."""
    return committed_clone(tmp_path / "verlib", VERLIB)


@pytest.mark.docker
def test_a_clone_whose_build_writes_its_version_file_gets_a_baseline_and_workspaces_that_hold_it(
    verlib_clone, tmp_path, docker_backend, base_image
):
    from task_synth.candidates.deletion import delete_unit
    from task_synth.settings import SynthSettings
    from task_synth.store.task_builder import task_workspace
    from task_synth.validation.canary_scan import archive_files

    with prepared_clone(verlib_clone, SynthSettings(seed=0), docker_backend, tmp_path) as context:
        assert context.baseline.stable >= {"tests/test_verlib.py::test_version"}
        assert (context.checkout.root / "src/verlib/_version.py").read_text().startswith('version = "1.4.0"')
        assert context.layout.generated == {"src/verlib/_version.py"}
        units = enumerate_units(context.layout)
        assert {unit.path for unit in units} == {"src/verlib/words.py"}
        # The agent's workspace holds the file, so the canary scan reads it too.
        workspace = task_workspace(context, delete_unit(context.layout, units[0], "stub"))
        files = dict(archive_files(workspace.archive))
        assert b"def version_tuple" in files["workspace/src/verlib/_version.py"]
