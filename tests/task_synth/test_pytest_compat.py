"""A repository whose conftest asks for a py.path hook argument gets a pytest that still passes it."""

from pathlib import Path

from task_synth.repository.pytest_compat import BEFORE_LEGACY_REMOVAL, legacy_hooks, pytest_requirement
from task_synth.repository.wheelhouse import suite_tools, wheelhouse_key

# boltons 24.1.0's conftest, in spirit: pytest 9 refuses the whole suite over this signature
LEGACY = "def pytest_ignore_collect(path, config):\n    return path.basename.endswith('_py2.py')\n"
MODERN = "def pytest_ignore_collect(collection_path, config):\n    return False\n"


def test_legacy_hook_arguments_are_found():
    assert legacy_hooks(LEGACY) == ["pytest_ignore_collect(path)"]
    assert legacy_hooks("def pytest_report_header(config, startdir):\n    return 'x'\n") == [
        "pytest_report_header(startdir)"
    ]
    assert legacy_hooks(MODERN) == []
    assert legacy_hooks("def helper(path):\n    pass\n") == []  # not a hook
    assert legacy_hooks("def pytest_ignore_collect(path:\n") == []  # unparsable: pytest will say so itself


def test_a_legacy_conftest_caps_pytest_and_changes_the_wheelhouse(tmp_path: Path):
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='lib')\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(MODERN)
    assert pytest_requirement(tmp_path) == "pytest"
    modern_key = wheelhouse_key(tmp_path)
    (tmp_path / "conftest.py").write_text(LEGACY)
    assert pytest_requirement(tmp_path) == BEFORE_LEGACY_REMOVAL
    assert suite_tools(tmp_path)[0] == BEFORE_LEGACY_REMOVAL
    assert wheelhouse_key(tmp_path) != modern_key  # a cached wheelhouse with pytest 9 is not reused


def test_conftests_in_virtualenvs_do_not_count(tmp_path: Path):
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "conftest.py").write_text(LEGACY)
    assert pytest_requirement(tmp_path) == "pytest"


def test_addopts_are_read_from_the_file_pytest_would_read(tmp_path: Path):
    from task_synth.repository.pytest_compat import project_addopts

    (tmp_path / "setup.cfg").write_text("[tool:pytest]\naddopts = --import-mode=append\n")
    assert project_addopts(tmp_path) == ["--import-mode=append"]
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = ["--doctest-modules", "-ra"]\n')
    assert project_addopts(tmp_path) == ["--doctest-modules", "-ra"]
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --doctest-modules --import-mode importlib -p xdist\n")
    assert project_addopts(tmp_path) == ["--doctest-modules", "--import-mode", "importlib", "-p", "xdist"]
    (tmp_path / "pytest.ini").write_text("[pytest]\ndoctest_optionflags = ELLIPSIS\n")
    assert project_addopts(tmp_path) == []  # pytest.ini wins even without addopts


def test_only_import_options_are_kept_and_doctests_are_noticed():
    from task_synth.repository.pytest_compat import dropped_doctests, kept_options

    addopts = ["--doctest-modules", "--import-mode", "importlib", "-p", "xdist", "-m", "not slow", "--cov=lib"]
    assert kept_options(addopts) == ["--import-mode", "importlib"]
    assert kept_options(["--import-mode=importlib"]) == ["--import-mode=importlib"]
    assert dropped_doctests(addopts) and dropped_doctests(["--doctest-glob=*.rst"])
    assert not dropped_doctests(["-ra"])


def test_the_default_command_gains_the_projects_import_mode_and_a_users_command_does_not(tmp_path: Path):
    from task_synth.settings import DEFAULT_TEST_COMMAND, SynthSettings
    from task_synth.validation.repo_context import with_project_options

    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --doctest-modules --import-mode=importlib\n")
    assert (
        with_project_options(SynthSettings(), tmp_path).test_command
        == f"{DEFAULT_TEST_COMMAND} --import-mode=importlib"
    )
    own = SynthSettings(test_command="python -m pytest tests")
    assert with_project_options(own, tmp_path).test_command == "python -m pytest tests"
