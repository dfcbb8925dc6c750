"""Test requirements declared outside extras and requirements files (PEP 735 groups, Poetry groups, tox deps) reach
the wheelhouse: a suite whose tests import them would otherwise fail at collection in the sandbox."""

import textwrap
from pathlib import Path

import pytest

from task_synth.repository.declared_test_deps import declared_test_deps, dependency_groups, poetry_groups, tox_deps
from task_synth.repository.wheelhouse import build_only, build_wheelhouse

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "tiny"
version = "0.1"

[dependency-groups]
Tests = ["idna>=3", {include-group = "typing"}, "pytest @ https://example.org/pytest.zip"]
typing = ["six"]
docs = ["sphinx"]

[tool.poetry.group.test.dependencies]
python = "^3.11"
tomli = "^2.0"
"""
TOX = """\
[tox]
envlist = py311

[testenv]
deps =
    -r{toxinidir}/requirements/ci.txt
    -c constraints.txt
    wcwidth  # every env
    py311: attrs
    pytestmain: git+https://github.com/pytest-dev/pytest.git@main
    {[base]deps}
    .[test]
commands = pytest
"""


def _project(root: Path) -> Path:
    (root / "src" / "tiny").mkdir(parents=True)
    (root / "src" / "tiny" / "__init__.py").write_text("")
    (root / "requirements").mkdir()
    (root / "requirements" / "ci.txt").write_text("sniffio\n")
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "tox.ini").write_text(TOX)
    return root


def test_test_groups_are_read_with_their_included_groups_and_other_groups_left_out():
    import tomllib

    pyproject = tomllib.loads(PYPROJECT)
    assert dependency_groups(pyproject) == ["idna>=3", "six", "pytest @ https://example.org/pytest.zip"]
    assert poetry_groups(pyproject) == ["tomli"]  # Poetry's caret is no PEP 508 constraint; python is no package


def test_a_group_that_includes_itself_is_read_once():
    pyproject = {
        "dependency-groups": {"test": ["a", {"include-group": "dev"}], "dev": ["b", {"include-group": "test"}]}
    }
    assert dependency_groups(pyproject) == ["a", "b"]


def test_tox_deps_give_requirements_and_the_files_it_names(tmp_path):
    root = _project(tmp_path / "tiny")
    requirements, files = tox_deps(root)
    assert requirements == ["wcwidth"] and files == [root / "requirements" / "ci.txt"]
    (root / "tox.ini").write_text("[tox\nbroken")
    assert tox_deps(root) == ([], [])


def test_declared_test_deps_are_not_taken_for_build_only_requirements(tmp_path):
    root = _project(tmp_path / "tiny")
    assert declared_test_deps(root)[0] == ["idna>=3", "six", "tomli", "wcwidth"]
    assert build_only(root, ["six", "sniffio"]) == {"setuptools"}


@pytest.mark.pypi
def test_the_wheelhouse_holds_every_declared_test_requirement(tmp_path):
    wheelhouse = build_wheelhouse(_project(tmp_path / "tiny"), tmp_path / "cache")
    names = {wheel.name.split("-")[0].lower() for wheel in wheelhouse.glob("*.whl")}
    assert {"idna", "six", "tomli", "wcwidth", "sniffio"} <= names, textwrap.shorten(str(sorted(names)), 300)


@pytest.mark.pypi
def test_a_declared_requirement_that_does_not_resolve_leaves_the_wheelhouse_to_the_project(tmp_path):
    root = _project(tmp_path / "tiny")
    (root / "tox.ini").write_text("[testenv]\ndeps =\n    regrow-no-such-package-anywhere==0.0.1\n")
    wheelhouse = build_wheelhouse(root, tmp_path / "cache")
    names = {wheel.name.split("-")[0].lower() for wheel in wheelhouse.glob("*.whl")}
    assert "pytest" in names and {"idna", "six"}.isdisjoint(names)  # the guesses went together
