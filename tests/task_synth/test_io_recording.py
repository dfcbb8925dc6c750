"""Recording I/O checks of a deleted function: the literal filter, the recorder plugin, and choosing checks (no Docker)."""

import ast
import enum
import json
import os
import subprocess
import sys
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from proto.tasks import IoCheck, TaskRecord, TaskStats
from task_synth.candidates import enumerate_units
from task_synth.deletion import delete_unit
from task_synth.io_recorder_plugin import literal_text
from task_synth.io_recording import (
    MAX_CHECKS,
    RECORDER,
    RECORDER_SOURCE,
    calls_in_both,
    canonical,
    parsed_call,
    recorded_functions,
    selected_checks,
    unique_calls,
)
from task_synth.repo_layout import read_layout
from task_synth.task_store import write_store

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
FUNCTIONS = {"pkg.core": ["double", "letters"]}


class Color(enum.IntEnum):
    RED = 1


class Text(str):
    pass


@pytest.mark.parametrize(
    "value",
    [None, True, -3, 2**64, 1.5, -0.0, "café", b"\x00bytes", (1, "a"), [1, [2, (3,)]], {"a": [1.0], 2: None}, {3, 1, 2}, set(), ()],
)
def test_plain_literals_are_kept_as_text_that_reads_back_equal(value):
    text = literal_text(value)
    assert text is not None and ast.literal_eval(text) == value


def _self_referencing_list():
    items = [1]
    items.append(items)
    return items


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        [1.0, float("-inf")],
        frozenset({1}),  # its repr is a call, which literal_eval refuses
        Color.RED,  # an int subclass whose repr is no literal
        Text("abc"),
        OrderedDict(a=1),
        object(),
        [object()],
        "x" * 301,
        list(range(400)),
        [[0] * 50] * 10,  # few elements at the top, too many in all
        2**2000,
        _self_referencing_list(),
    ],
    ids=lambda value: type(value).__name__,
)
def test_values_that_are_no_short_literal_are_refused(value):
    assert literal_text(value) is None


def _call(qualname="double", args="(1,)", kwargs="{}", result="2", raises=None, test="tests/test_core.py::test_a"):
    raw = {"module": "pkg.core", "qualname": qualname, "args": args, "kwargs": kwargs, "result": result, "raises": raises, "test": test}
    call = parsed_call(raw, FUNCTIONS)
    assert call is not None, raw
    return call


@pytest.mark.parametrize(
    "change",
    [
        {"qualname": "other"},  # not a recorded function
        {"module": "pkg.elsewhere"},
        {"args": "[1]"},  # positional arguments are a tuple
        {"kwargs": "{1: 2}"},  # keyword names are strings
        {"args": "(__import__('os'),)"},  # code, not a literal
        {"result": None},  # neither a result nor an exception
        {"raises": "ValueError"},  # both
        {"result": None, "raises": "not a name"},
        {"result": None, "raises": "NotImplementedError"},  # what the stub raises: no check against it
        {"result": None, "raises": "AttributeError"},  # what calling a removed function raises
        {"result": "'" + "x" * 400 + "'"},
        {"test": 3},
        {"args": None},
    ],
)
def test_malformed_recorder_output_is_dropped(change):
    raw = {"module": "pkg.core", "qualname": "double", "args": "(1,)", "kwargs": "{}", "result": "2", "raises": None, "test": None}
    assert parsed_call({**raw, **change}, FUNCTIONS) is None


def test_canonical_text_ignores_set_and_dict_order():
    assert canonical({"b", "a"}) == canonical({"a", "b"})
    assert canonical({"x": 1, "y": 2}) == canonical({"y": 2, "x": 1})
    assert canonical([1, 2]) != canonical((1, 2)) != canonical({1, 2})


def test_identical_calls_collapse_and_a_call_with_two_outcomes_is_dropped():
    calls = [_call(args="(1,)"), _call(args="(1,)", test="tests/test_core.py::test_b"), _call(args="(2,)", result="4"), _call(args="(2,)", result="5")]
    assert [call.check.args for call in unique_calls(calls)] == ["(1,)"]


def test_only_calls_with_the_same_outcome_under_both_hash_seeds_are_kept():
    first = [_call("letters", "('ab',)", result="{'a', 'b'}"), _call(args="(3,)", result="6"), _call(args="(4,)", result="8")]
    second = [_call("letters", "('ab',)", result="{'b', 'a'}"), _call(args="(3,)", result="7")]
    kept = calls_in_both(first, second)
    assert [(call.check.qualname, call.check.result) for call in kept] == [("letters", "{'a', 'b'}")]


def test_checks_are_capped_and_taken_in_turn_from_each_function():
    calls = [_call(args=f"({n},)", result=str(2 * n)) for n in range(10)] + [_call("letters", f"('{c}',)", result=f"{{'{c}'}}") for c in "xyz"]
    chosen = selected_checks(calls)
    assert len(chosen) == MAX_CHECKS
    assert [check.qualname for check in chosen[:6]] == ["double", "letters"] * 3
    assert [check.args for check in chosen if check.qualname == "double"] == ["(0,)", "(1,)", "(2,)", "(3,)", "(4,)"]


@pytest.fixture(scope="module")
def minilib_units():
    layout = read_layout(MINILIB)
    return layout, {(unit.kind, unit.qualname): unit for unit in enumerate_units(layout)}


def test_functions_and_features_record_their_function_modules_their_public_functions(minilib_units):
    layout, units = minilib_units
    function = delete_unit(layout, units["function", "clamp"], "stub")
    assert recorded_functions(function, "minilib.mathops") == {"minilib.mathops": ["clamp"]}
    feature = delete_unit(layout, units["feature", "variance"], "remove")  # its private helper gives no checks
    assert recorded_functions(feature, "minilib.mathops") == {"minilib.mathops": ["variance"]}
    module = delete_unit(layout, units["module", "minilib.textops"], "file")
    public = ["slugify", "wrap_words", "count_vowels", "title_case", "truncate"]
    assert recorded_functions(module, "minilib.textops") == {"minilib.textops": public}
    for kind, qualname in [("class", "BoundedStack"), ("method", "BoundedStack.push")]:
        assert recorded_functions(delete_unit(layout, units[kind, qualname], "stub"), "minilib.containers") == {}


PACKAGE = {
    "pkg/__init__.py": "from pkg.core import double\n",
    "pkg/core.py": '''
def double(x):
    return 2 * x


def factorial(n):
    return 1 if n <= 1 else n * factorial(n - 1)


def quadruple(x):
    return double(double(x))


def pop_last(items):
    return items.pop()


def letters(text):
    return set(text)


def fail(x):
    raise KeyError(x)
''',
    "tests/test_core.py": '''
import pkg
from pkg.core import factorial, letters, pop_last, quadruple
from pkg import core


def test_calls():
    assert pkg.double(3) == 6
    assert factorial(4) == 24
    assert quadruple(1) == 4
    assert pop_last([1, 2]) == 2
    assert letters("aba") == {"a", "b"}
    assert len(core.double([object()])) == 2  # no literal argument


def test_raises():
    try:
        core.fail("k")
    except KeyError:
        pass
''',
}


def test_recorder_keeps_direct_literal_calls_that_leave_their_arguments_alone(tmp_path):
    """Recursion and the library's own calls are not recorded, nor a call that mutated its argument."""
    for path, text in PACKAGE.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / f"{RECORDER}.py").write_text(RECORDER_SOURCE.read_text())
    functions = {"pkg.core": ["double", "factorial", "quadruple", "pop_last", "letters", "fail"]}
    library = [str(tmp_path / "pkg" / name) for name in ("__init__.py", "core.py")]
    (tmp_path / "config.json").write_text(json.dumps({"functions": functions, "library_files": library}))
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path / 'plugins'}{os.pathsep}{tmp_path}",
        "REGROW_IO_CONFIG": str(tmp_path / "config.json"),
        "REGROW_IO_OUT": str(tmp_path / "calls.json"),
        "PYTEST_ADDOPTS": "",
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", RECORDER, "tests", "--rootdir", str(tmp_path)]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    calls = [parsed_call(raw, functions) for raw in json.loads((tmp_path / "calls.json").read_text())]
    assert [(c.check.qualname, c.check.args, c.outcome) for c in calls] == [
        ("double", "(3,)", ("6", None)),  # through the package's re-export
        ("factorial", "(4,)", ("24", None)),  # once, not per recursion step
        ("quadruple", "(1,)", ("4", None)),  # its calls of double are the library's own
        ("letters", "('aba',)", (canonical({"a", "b"}), None)),
        ("fail", "('k',)", (None, "KeyError")),
    ]
    assert calls[0].test == "tests/test_core.py::test_calls"


def test_store_writes_io_checks_for_every_task_and_keeps_them_out_of_the_record(tmp_path):
    def record(identifier):
        return TaskRecord(
            instance_id=identifier, repo="r", source_commit="c", image="i", mode="stub", deleted=[], problem_statement="p",
            FAIL_TO_PASS=["t"], PASS_TO_PASS=["u"], test_command="pytest", solution_patch="diff", test_files=[],
            stats=TaskStats(lines_deleted=1, covering_tests=1, complexity=1), created_at=datetime.now(UTC), synth_version="0",
        )

    check = IoCheck(module="pkg.core", qualname="double", args="(1,)", result="2")
    write_store(tmp_path, [record("with"), record("without")], tmp_path, {"with": [check]})
    assert json.loads((tmp_path / "hidden" / "with" / "io_checks.json").read_text()) == [check.model_dump()]
    assert json.loads((tmp_path / "hidden" / "without" / "io_checks.json").read_text()) == []
    assert "double" not in (tmp_path / "tasks.jsonl").read_text()
