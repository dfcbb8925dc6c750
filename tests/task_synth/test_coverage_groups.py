"""Multi-unit features found by coverage: which units a group of tests makes one feature of, and how a group is
deleted, stood in for and described (pure Python, on the minilib fixture; no Docker)."""

import ast
from pathlib import Path

import pytest

from task_synth.candidates.coverage_groups import MAX_PARTS, coverage_groups, group_unit, groups_of, narrowed
from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import Unit, enumerate_units
from task_synth.pipeline import _without_unchecked
from task_synth.repository.repo_layout import read_layout
from task_synth.store.problem_statement import problem_statement
from task_synth.store.task_builder import BuiltTask
from task_synth.validation.io_recording import recorded_functions
from task_synth.validation.stand_ins import combined_stand_in, stand_ins
from task_synth.validation.verdict import broken_test_files, mentioned_names

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
CONTAINERS = "src/minilib/containers.py"


def _unit(qualname: str, kind: str = "function", path: str = "pkg/a.py", statements: int = 3, line: int = 1) -> Unit:
    return Unit(path, qualname, kind, line, line + 5, ((line + 1, line + 5),), statements, 1)


def test_a_test_belongs_to_its_file_its_class_and_its_function_whatever_its_parameters():
    assert groups_of("tests/test_a.py::test_one[1-x::y]") == ["tests/test_a.py", "tests/test_a.py::test_one"]
    assert groups_of("tests/test_a.py::TestA::test_one") == [
        "tests/test_a.py",
        "tests/test_a.py::TestA",
        "tests/test_a.py::TestA::test_one",
    ]


def test_units_that_a_test_file_mostly_reaches_make_one_feature_and_shared_ones_stay_out():
    parse, render, shared, alone = _unit("parse"), _unit("render", line=10), _unit("log", line=20), _unit("x", line=30)
    reach = {
        "parse": {"t/test_p.py::test_1", "t/test_p.py::test_2"},
        "render": {"t/test_p.py::test_3"},
        # Most of its tests are elsewhere: a utility, not part of test_p's feature.
        "log": {"t/test_p.py::test_1", "t/test_q.py::test_1", "t/test_r.py::test_1"},
        "x": {"t/test_q.py::test_9"},  # the only unit test_q reaches on its own: no group of one
    }
    groups = coverage_groups([parse, render, shared, alone], lambda unit: reach[unit.qualname])
    group = groups[0]  # the affinity groups come first; the reach groups of this tiny suite follow
    assert group.parts == (parse, render)
    assert (group.kind, group.qualname, group.start_line, group.end_line) == ("group", "parse+render", 1, 15)
    assert group.body_lines == parse.body_lines + render.body_lines
    assert group.statements == 6


def test_a_unit_that_runs_as_the_package_imports_is_in_no_group():
    # semver's `_comparator` decorates six methods at import; with it deleted no group of its tests' reach imports.
    decorator, compare, bump = _unit("_comparator"), _unit("compare", line=10), _unit("bump", line=20)
    tests = {"t/test_v.py::test_1", "t/test_v.py::test_2"}
    groups = coverage_groups([decorator, compare, bump], lambda unit: tests, lambda unit: unit is decorator)
    assert groups and all(group.parts == (compare, bump) for group in groups)


def test_a_group_keeps_its_largest_parts_in_source_order_and_is_made_once_for_a_file_and_its_class():
    units = [_unit(f"f{index}", statements=3 + index, line=10 * index) for index in range(MAX_PARTS + 2)]
    groups = coverage_groups(units, lambda unit: {"t/test_a.py::TestA::test_1"})
    [group] = groups  # the file's, the class's and the function's group hold the same units
    assert [part.qualname for part in group.parts] == [f"f{index}" for index in range(2, MAX_PARTS + 2)]


def test_classes_modules_and_uncovered_units_are_never_parts():
    units = [_unit("A", kind="class"), _unit("m", kind="module", line=20), _unit("f", line=40), _unit("g", line=50)]
    groups = coverage_groups(units, lambda unit: set() if unit.qualname == "g" else {"t/test_a.py::test_1"})
    assert groups == []


def test_a_test_reaches_a_feature_across_modules_without_the_machinery_most_of_the_suite_runs():
    reader, writer = _unit("Reader.read", kind="method", path="pkg/r.py"), _unit("write", path="pkg/w.py", line=40)
    machinery = _unit("dispatch", path="pkg/c.py")
    suite = {f"t/test_{name}.py::test_{n}" for name in ("a", "b") for n in range(3)}
    reach = {
        # Each is also run by a test of the other file, so no file holds most of its tests: no affinity group.
        "Reader.read": {"t/test_a.py::test_0", "t/test_b.py::test_0"},
        "write": {"t/test_a.py::test_0", "t/test_b.py::test_1"},
        "dispatch": suite,  # every test runs it: shared machinery, in no test's feature
    }
    groups = coverage_groups([machinery, reader, writer], lambda unit: reach[unit.qualname])
    [group] = groups  # t/test_a.py and its test_0 reach the same two parts
    assert group.parts == (reader, writer)
    assert (group.path, group.qualname) == ("pkg/r.py", "Reader.read+pkg/w:write")


def test_a_reach_group_takes_the_parts_the_fewest_tests_run_first():
    units = [_unit(f"f{n}", path=f"pkg/m{n}.py") for n in range(MAX_PARTS + 2)]
    tests = [f"t/test_a.py::test_{n}" for n in range(20)]
    # The machinery runs in every test; f0 in 9, f7 in 2: all in test_0, none in more than half of the suite.
    groups = coverage_groups(
        [_unit("machinery"), *units],
        lambda unit: set(tests) if unit.qualname == "machinery" else set(tests[: 9 - int(unit.qualname[1:])]),
    )
    assert {part.qualname for part in groups[0].parts} == {f"f{n}" for n in range(2, MAX_PARTS + 2)}


def test_a_group_across_modules_is_deleted_stood_in_recorded_and_described_in_each_file(layout):
    by_name = {(unit.path, unit.qualname): unit for unit in enumerate_units(layout)}
    textops, report = "src/minilib/textops.py", "src/minilib/report.py"
    group = group_unit([by_name[report, "render_table"], by_name[textops, "truncate"]])
    assert group.path == report and group.qualname == "render_table+src/minilib/textops:truncate"
    stubbed = delete_unit(layout, group, "stub")
    assert set(stubbed.changed) == {textops, report}
    for path, name in ((textops, "truncate"), (report, "render_table")):
        [function] = [node for node in ast.parse(stubbed.changed[path]).body if getattr(node, "name", "") == name]
        assert ast.unparse(function.body[-1]) == "raise NotImplementedError"
    for stand_in in stand_ins(stubbed):
        assert {textops, report} <= set(stand_in.changed)
        assert "NotImplementedError" not in stand_in.changed[textops] + stand_in.changed[report]
    assert recorded_functions(stubbed, layout.modules) == {
        "minilib.report": ["render_table"],
        "minilib.textops": ["truncate"],
    }
    removed = delete_unit(layout, group, "remove")
    assert "def truncate" not in removed.changed[textops] and "def render_table" not in removed.changed[report]
    statement = problem_statement(removed, "minilib.report", ["tests/test_report.py::test_table"], {})
    assert "These functions and methods have been removed." in statement
    assert '- `truncate` in `src/minilib/textops.py`: `def truncate(text, limit, ellipsis="..."): ...`' in statement
    assert "- `render_table` in `src/minilib/report.py`" in statement


@pytest.fixture(scope="module")
def layout():
    return read_layout(MINILIB)


@pytest.fixture(scope="module")
def lru_group(layout):
    by_name = {unit.qualname: unit for unit in enumerate_units(layout) if unit.path == CONTAINERS}
    return group_unit([by_name["LRUCache.__init__"], by_name["LRUCache.get"], by_name["LRUCache.put"]])


def _functions(source: str) -> dict[str, ast.FunctionDef]:
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            found |= {f"{node.name}.{m.name}": m for m in node.body if isinstance(m, ast.FunctionDef)}
    return found


def test_stubbing_a_group_stubs_every_part_and_nothing_else(layout, lru_group):
    deletion = delete_unit(layout, lru_group, "stub")
    functions = _functions(deletion.changed[CONTAINERS])
    for name in ("LRUCache.__init__", "LRUCache.get", "LRUCache.put"):
        assert ast.unparse(functions[name].body[-1]) == "raise NotImplementedError"
    assert ast.unparse(functions["LRUCache.keys"].body[-1]) != "raise NotImplementedError"
    assert ast.unparse(functions["BoundedStack.push"].body[-1]) != "raise NotImplementedError"


def test_removing_a_group_removes_every_part(layout, lru_group):
    functions = _functions(delete_unit(layout, lru_group, "remove").changed[CONTAINERS])
    assert {"LRUCache.__init__", "LRUCache.get", "LRUCache.put"}.isdisjoint(functions)
    assert "LRUCache.keys" in functions


def test_every_stand_in_of_a_group_answers_for_every_part_and_init_returns_none(layout, lru_group):
    deletion = delete_unit(layout, lru_group, "stub")
    answers = {stand_in.name: _functions(stand_in.changed[CONTAINERS]) for stand_in in stand_ins(deletion)}
    assert set(answers) == {"return an always-equal object", "return None", "return the first argument"}
    for functions in answers.values():
        assert ast.unparse(functions["LRUCache.__init__"].body[-1]) == "return None"
    first = answers["return the first argument"]
    assert ast.unparse(first["LRUCache.get"].body[-1]) == "return key"
    assert ast.unparse(first["LRUCache.put"].body[-1]) == "return key"
    combined = combined_stand_in(deletion)
    assert combined is not None and len(combined[1]) == 3


def test_a_group_is_recorded_named_and_described_by_each_part(layout, lru_group):
    deletion = delete_unit(layout, lru_group, "remove")
    assert recorded_functions(deletion, {CONTAINERS: "minilib.containers"}) == {
        "minilib.containers": ["LRUCache.__init__", "LRUCache.get", "LRUCache.put"]
    }
    assert mentioned_names(deletion) == {"LRUCache", "get", "put"}
    assert broken_test_files(deletion, {"tests/t.py": "from minilib.containers import LRUCache\n"}, "x") == set()
    statement = problem_statement(deletion, "minilib.containers", ["tests/test_containers.py::test_lru"], {})
    assert "These functions and methods have been removed from `src/minilib/containers.py`" in statement
    for part in ("`LRUCache.__init__`", "`LRUCache.get`: `def get(self, key, default=None): ...`", "`LRUCache.put`"):
        assert part in statement
    helpers = {"tests/helpers.py": "class Fake:\n    def __init__(self):\n        self.cache = None\n"}
    with_helper = problem_statement(deletion, "minilib.containers", ["tests/test_containers.py::test_lru"], helpers)
    assert "tests/helpers.py:2" not in with_helper  # a test helper's own __init__ is no use of LRUCache.__init__


def test_a_group_narrowed_to_the_parts_with_evidence_is_a_smaller_group_or_the_one_part_left():
    parts = [_unit(name, line=n * 10) for n, name in enumerate(["a", "b", "c"], 1)]
    group = group_unit(parts)
    smaller = narrowed(group, ["pkg/a.py::b"])
    assert smaller is not None and [p.qualname for p in smaller.parts] == ["a", "c"] and smaller.kind == group.kind
    alone = narrowed(group, ["pkg/a.py::a", "pkg/a.py::c"])
    assert alone is not None and alone.qualname == "b" and alone.parts == ()
    assert narrowed(group, ["pkg/a.py::a", "pkg/a.py::b", "pkg/a.py::c"]) is None
    assert narrowed(group, []) is None and narrowed(parts[0], ["pkg/a.py::a"]) is None


def test_a_group_whose_checks_of_one_part_are_weak_comes_back_without_that_part():
    """toolz's groups with `_check_sigspec`, whose PyPy and registry branches no call runs, were dropped whole."""
    group = group_unit([_unit(name, line=n * 10) for n, name in enumerate(["a", "b", "c"], 1)])
    weak = BuiltTask(None, "weak_checks", None, 0, unchecked=["pkg/a.py::b"])
    ((again, mode),) = _without_unchecked(group, "stub", weak, set())
    assert mode == "stub" and [part.qualname for part in again.parts] == ["a", "c"]
    assert _without_unchecked(group, "stub", BuiltTask(None, "flaky", None, 0, unchecked=["pkg/a.py::b"]), set()) == []
