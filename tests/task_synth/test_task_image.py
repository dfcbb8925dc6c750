"""The task image drops pip and what only the build needed (they vendor popular projects: a leak when the repository
is one of them), and keeps whatever the project or its tests require."""

import uuid

import pytest

from task_synth.repository.build_tools import removable, requirement_names
from task_synth.repository.repo_image import build_repo_image, build_stage_tag
from task_synth.repository.wheelhouse import BUILD_ONLY, OWN_WHEELS, build_only, set_aside_own_wheels
from tests.task_synth.test_own_wheel import LIST_DISTRIBUTIONS, build_wheel

INSTALLED = {
    "pip": set(),
    "setuptools": set(),
    "setuptools-scm": {"setuptools", "packaging"},
    "packaging": set(),
    "pytest": {"packaging", "pluggy"},
    "pluggy": set(),
    "more-itertools": set(),
}


def test_pip_and_the_build_only_tools_go_but_what_the_tests_need_stays():
    gone = removable(INSTALLED, {"setuptools-scm"}, own_requires={"more-itertools"})
    assert gone == {"pip", "setuptools", "setuptools-scm"}  # packaging stays: pytest needs it


def test_a_build_tool_the_project_needs_at_run_time_stays():
    assert "setuptools" not in removable(INSTALLED, {"setuptools-scm"}, own_requires={"setuptools"})


def test_a_build_tool_a_test_dependency_needs_stays():
    installed = {**INSTALLED, "pytest-plugin": {"setuptools"}}
    assert removable(installed, {"setuptools-scm"}, own_requires=set()) == {"pip", "setuptools-scm"}


def test_without_the_projects_own_metadata_only_pip_goes():
    assert removable(INSTALLED, {"setuptools-scm"}, own_requires=None) == {"pip"}


def test_requirement_names_follow_markers_extras_and_skip_what_is_no_requirement():
    lines = [
        "Foo_Bar>=1 ; python_version >= '3'",
        "old ; python_version < '3'",
        "pytest ; extra == 'test'",
        "docs-only ; extra == 'docs'",
        "-r other.txt",
        "# a comment",
        "zipp  # pinned for the tests",
        "",
    ]
    assert requirement_names(lines, ("test",)) == {"foo-bar", "pytest", "zipp"}
    assert requirement_names(lines) == {"foo-bar", "zipp"}


def test_the_build_only_list_leaves_out_what_a_requirements_file_also_asks_for(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61", "setuptools_scm[toml]>=7"]\n'
        'build-backend = "setuptools.build_meta"\n'
    )
    (tmp_path / "requirements-test.txt").write_text("setuptools\npytest\n")
    assert build_only(tmp_path, ["wheel"]) == {"setuptools-scm", "wheel"}


@pytest.mark.docker
def test_the_task_image_has_no_pip_nor_the_build_only_tools_and_the_build_stage_has_them(
    tmp_path, docker_backend, base_image
):
    wheels = tmp_path / "wheels"
    source = tmp_path / "src"
    build_wheel(source, "shared-dep", [], wheels)
    build_wheel(source, "build-helper", [], wheels)
    build_wheel(source, "backendy", ["build-helper", "shared-dep"], wheels)
    build_wheel(source, "testlib", ["shared-dep"], wheels)
    build_wheel(source, "myproject", ["testlib"], wheels)
    set_aside_own_wheels(wheels, "myproject")
    (wheels / BUILD_ONLY).write_text("backendy\n")
    assert [path.name for path in (wheels / OWN_WHEELS).iterdir()] == ["myproject-2.9-py3-none-any.whl"]
    tag = f"regrow/repo-task-image-test:{uuid.uuid4().hex[:8]}"
    try:
        assert build_repo_image(docker_backend, tag, wheels)
        with docker_backend.create(tag) as sb:
            task = _names(sb.exec(LIST_DISTRIBUTIONS, timeout=60).stdout)
            no_pip = sb.exec("python -m pip --version", timeout=60)
        with docker_backend.create(build_stage_tag(tag)) as sb:
            build = _names(sb.exec(LIST_DISTRIBUTIONS, timeout=60).stdout)
        assert no_pip.exit_code != 0 and "No module named pip" in no_pip.stderr
        assert {"pip", "backendy", "build-helper"} <= build
        assert not {"pip", "backendy", "build-helper"} & task
        assert {"testlib", "shared-dep"} <= task
    finally:
        docker_backend.remove_image(tag)
        docker_backend.remove_image(build_stage_tag(tag))


def _names(listing: str) -> set[str]:
    return {line.partition("==")[0].lower() for line in listing.split() if "==" in line}
