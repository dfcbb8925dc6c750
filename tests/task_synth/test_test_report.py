"""Test outcomes come back under pytest's own node ids, from a plugin of ours, not mapped back from JUnit XML.

The JUnit mapping (file + classname + name) got inherited tests wrong: with a test folder named `Tests/` (Pillow's
layout), a mixin's test run by `Tests/test_cache.py::TestCache` came back as `Tests/helpers.py::test_defaults`, which
no pytest run can select, so the test counted as failing everywhere.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from task_synth.validation.suite_runs import REPORT_PLUGIN_NAME, REPORT_PLUGIN_SOURCE, files_of_tests, read_report

SUITE = {
    "Tests/__init__.py": "",
    "Tests/helpers.py": ("class CacheChecks:\n    def test_defaults(self):\n        assert self.make() == {}\n"),
    "Tests/test_cache.py": (
        "import pytest\n"
        "from Tests.helpers import CacheChecks\n\n\n"
        "class TestCache(CacheChecks):\n"
        "    def make(self):\n"
        "        return {}\n\n"
        "    class TestNested:\n"
        "        def test_inner(self):\n"
        "            pass\n\n\n"
        "@pytest.mark.parametrize('value', ['a.b', 'c::d', 'e/f'])\n"
        "def test_ids(value):\n"
        "    assert value != 'e/f'\n\n\n"
        "@pytest.mark.skip\n"
        "def test_skipped():\n"
        "    pass\n\n\n"
        "@pytest.fixture\n"
        "def broken_teardown():\n"
        "    yield\n"
        "    raise RuntimeError('teardown')\n\n\n"
        "def test_teardown_fails(broken_teardown):\n"
        "    pass\n"
    ),
}


def _pytest(
    root: Path, *arguments: str, repeat: int = 1, selected: list[str] | None = None
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(root / "plugins"),
        "REGROW_REPEAT": str(repeat),
        "REGROW_REPORT_OUT": str(root / "report.json"),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # the plugins named with -p only, as in a task's image
    }
    if selected is not None:
        (root / "selected.json").write_text(json.dumps(selected))
        env["REGROW_SELECTED"] = str(root / "selected.json")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", REPORT_PLUGIN_NAME, *arguments]
    return subprocess.run(command, cwd=root / "repo", env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def suite(tmp_path) -> Path:
    for name, text in SUITE.items():
        (tmp_path / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / name).write_text(text)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / f"{REPORT_PLUGIN_NAME}.py").write_text(REPORT_PLUGIN_SOURCE.read_text())
    return tmp_path


def test_outcomes_are_keyed_by_the_node_ids_pytest_collects(suite):
    collected = _pytest(suite, "--collect-only", "-q").stdout.split()
    _pytest(suite)
    [outcomes] = read_report((suite / "report.json").read_bytes())
    assert sorted(outcomes) == sorted(line for line in collected if "::" in line)
    assert outcomes["Tests/test_cache.py::TestCache::test_defaults"] is True  # the inherited test, by its runner
    assert outcomes["Tests/test_cache.py::TestCache::TestNested::test_inner"] is True
    assert outcomes["Tests/test_cache.py::test_ids[e/f]"] is False
    assert outcomes["Tests/test_cache.py::test_ids[c::d]"] is True
    assert outcomes["Tests/test_cache.py::test_skipped"] is False  # a skip is no pass
    assert outcomes["Tests/test_cache.py::test_teardown_fails"] is False  # a teardown error fails the test


def test_a_repeated_run_keeps_each_rounds_outcomes_and_selects_by_node_id(suite):
    selected = ["Tests/test_cache.py::TestCache::test_defaults", "Tests/test_cache.py::test_ids[e/f]"]
    _pytest(suite, *selected, repeat=3)
    rounds = read_report((suite / "report.json").read_bytes())
    assert rounds == [dict(zip(selected, (True, False), strict=True))] * 3


# A registry that one test fills and another checks, as arrow's locale tests do: run out of order, the check fails.
ORDER_DEPENDENT = {
    "test_registry.py": (
        "REGISTRY = ['en']\n\n\n"
        "def test_all_names_are_two_letters():\n"
        "    assert all(len(name) == 2 for name in REGISTRY)\n\n\n"
        "def test_custom_names_register():\n"
        "    REGISTRY.append('custom')\n"
    ),
    "test_other.py": "def test_other():\n    pass\n",
}


def test_selected_tests_run_in_the_suites_order_whatever_order_they_are_given_in(tmp_path):
    for name, text in ORDER_DEPENDENT.items():
        (tmp_path / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / name).write_text(text)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / f"{REPORT_PLUGIN_NAME}.py").write_text(REPORT_PLUGIN_SOURCE.read_text())
    given = ["test_registry.py::test_custom_names_register", "test_registry.py::test_all_names_are_two_letters"]
    assert files_of_tests(given + ["test_other.py::test_other"]) == ["test_other.py", "test_registry.py"]
    _pytest(tmp_path, *files_of_tests(given), selected=given)
    [outcomes] = read_report((tmp_path / "report.json").read_bytes())
    assert list(outcomes) == given[::-1]  # the suite's order, not the order given
    assert all(outcomes.values())
    # By node id, pytest runs them as given, and the order-dependent test fails: what arrow's oracle saw.
    _pytest(tmp_path, *given)
    [by_id] = read_report((tmp_path / "report.json").read_bytes())
    assert by_id["test_registry.py::test_all_names_are_two_letters"] is False


def test_a_selected_id_that_no_longer_collects_is_missing_and_the_rest_still_run(suite):
    selected = ["Tests/test_cache.py::TestCache::test_defaults", "Tests/test_cache.py::test_gone"]
    _pytest(suite, *files_of_tests(selected), selected=selected)
    [outcomes] = read_report((suite / "report.json").read_bytes())
    assert outcomes == {"Tests/test_cache.py::TestCache::test_defaults": True}


def test_a_report_that_is_not_ours_is_refused():
    with pytest.raises(ValueError, match="JSON list"):
        read_report(json.dumps({"tests/test_a.py::test_x": True}).encode())
