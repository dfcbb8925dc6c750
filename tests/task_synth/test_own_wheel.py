"""A test dependency that requires the project itself (freezegun needs python-dateutil) resolves, and the repo image
still holds no installed copy of the project."""

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from task_synth.repository.repo_image import build_repo_image
from task_synth.repository.wheelhouse import OWN_WHEELS, set_aside_own_wheels

# The task image has no pip: the installed distributions, as name==version lines.
LIST_DISTRIBUTIONS = [
    "python",
    "-c",
    "from importlib import metadata\n"
    "for dist in metadata.distributions(): print(f\"{dist.metadata['Name']}=={dist.version}\")",
]


def build_wheel(root: Path, name: str, dependencies: list[str], out: Path) -> None:
    project = root / name
    (project / name.replace("-", "_")).mkdir(parents=True)
    (project / name.replace("-", "_") / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "2.9"\ndependencies = {dependencies!r}\n'.replace("'", '"')
    )
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        "-w",
        str(out),
        str(project),
    ]
    subprocess.run(command, check=True, capture_output=True)


def _wheelhouse(tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    build_wheel(tmp_path / "src", "tiny-dateutil", [], wheels)
    build_wheel(tmp_path / "src", "freezer", ["tiny-dateutil>=2.7"], wheels)
    set_aside_own_wheels(wheels, "tiny_dateutil")
    return wheels


def test_the_projects_own_wheel_is_kept_apart_not_dropped(tmp_path):
    wheels = _wheelhouse(tmp_path)
    assert [wheel.name for wheel in wheels.glob("*.whl")] == ["freezer-2.9-py3-none-any.whl"]
    assert [wheel.name for wheel in (wheels / OWN_WHEELS).glob("*.whl")] == ["tiny_dateutil-2.9-py3-none-any.whl"]


@pytest.mark.docker
def test_the_repo_image_installs_what_needs_the_project_then_uninstalls_the_project(
    tmp_path, docker_backend, base_image
):
    tag = f"regrow/repo-own-wheel-test:{uuid.uuid4().hex[:8]}"
    try:
        assert build_repo_image(docker_backend, tag, _wheelhouse(tmp_path))
        with docker_backend.create(tag) as sb:
            installed = sb.exec(LIST_DISTRIBUTIONS, timeout=60).stdout
        assert "freezer==2.9" in installed
        assert "tiny" not in installed  # each workspace installs it editable; no copy may stay in the image
    finally:
        docker_backend.remove_image(tag)


def test_the_project_is_known_by_its_poetry_name_or_its_sdists_pkg_info(tmp_path):
    from task_synth.repository.wheelhouse import project_name

    (tmp_path / "poetry").mkdir()
    (tmp_path / "poetry" / "pyproject.toml").write_text('[tool.poetry]\nname = "tomlkit"\nversion = "0.13.2"\n')
    assert project_name(tmp_path / "poetry") == "tomlkit"
    (tmp_path / "sdist").mkdir()
    (tmp_path / "sdist" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: jaraco.functools\nVersion: 4.1.0\n")
    (tmp_path / "sdist" / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    assert project_name(tmp_path / "sdist") == "jaraco_functools"
