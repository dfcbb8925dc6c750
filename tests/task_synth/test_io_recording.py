"""Recording I/O checks of a deleted function: the literal filter, the recorder plugin, and choosing checks (no
Docker)."""

import ast
import enum
import json
import os
import random
import subprocess
import sys
import time
from collections import OrderedDict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from proto.call_values import literal_text
from proto.evidence import has_secret_evidence
from proto.tasks import IoCheck, TaskRecord, TaskStats
from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.repository.repo_layout import read_layout
from task_synth.store.store_writer import RepoFiles, write_store
from task_synth.validation.call_runs import PROBE_BUDGET_S, PROBE_CALL_S, call_outcomes, probed, reproduced
from task_synth.validation.io_recording import recorded_functions
from task_synth.validation.recorded_calls import (
    MAX_CHECKS,
    calls_in_both,
    canonical,
    linked_calls,
    parsed_call,
    selected_checks,
    unique_calls,
)
from task_synth.validation.unseen_calls import (
    MAX_UNSEEN,
    perturbed_calls,
    perturbed_values,
    receiver_pools,
    recorded_arguments,
    unseen_checks,
)
from tests.task_synth.recorder_runs import LocalSandbox, recorded_raw_calls

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
FUNCTIONS = {"pkg.core": ["double", "letters"]}


class Color(enum.IntEnum):
    RED = 1


class Text(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        -3,
        2**64,
        1.5,
        -0.0,
        "café",
        b"\x00bytes",
        (1, "a"),
        [1, [2, (3,)]],
        {"a": [1.0], 2: None},
        {3, 1, 2},
        set(),
        (),
    ],
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
    raw = {
        "module": "pkg.core",
        "qualname": qualname,
        "args": args,
        "kwargs": kwargs,
        "result": result,
        "raises": raises,
        "test": test,
    }
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
        {"result": "'" + "x" * 5000 + "'"},  # longer than any description kept
        {"test": 3},
        {"args": None},
    ],
)
def test_malformed_recorder_output_is_dropped(change):
    raw = {
        "module": "pkg.core",
        "qualname": "double",
        "args": "(1,)",
        "kwargs": "{}",
        "result": "2",
        "raises": None,
        "test": None,
    }
    assert parsed_call({**raw, **change}, FUNCTIONS) is None


def test_canonical_text_ignores_set_and_dict_order():
    assert canonical({"b", "a"}) == canonical({"a", "b"})
    assert canonical({"x": 1, "y": 2}) == canonical({"y": 2, "x": 1})
    assert canonical([1, 2]) != canonical((1, 2)) != canonical({1, 2})


def test_identical_calls_collapse_and_a_call_with_two_outcomes_is_dropped():
    calls = [
        _call(args="(1,)"),
        _call(args="(1,)", test="tests/test_core.py::test_b"),
        _call(args="(2,)", result="4"),
        _call(args="(2,)", result="5"),
    ]
    assert [call.check.args for call in unique_calls(calls)] == ["(1,)"]


def test_only_calls_with_the_same_outcome_under_both_hash_seeds_are_kept():
    first = [
        _call("letters", "('ab',)", result="{'a', 'b'}"),
        _call(args="(3,)", result="6"),
        _call(args="(4,)", result="8"),
    ]
    second = [_call("letters", "('ab',)", result="{'b', 'a'}"), _call(args="(3,)", result="7")]
    kept = calls_in_both(first, second)
    assert [(call.check.qualname, call.check.result) for call in kept] == [("letters", "{'a', 'b'}")]


A, B, C = (f"tests/test_core.py::test_{name}" for name in "abc")


def test_a_call_several_tests_make_is_kept_once_and_linked_to_the_first_of_them_by_node_id():
    calls = [
        _call(args="(1,)", test=B),
        _call(args="(1,)", test=A),
        _call(args="(2,)", result="4", test=C),
        _call(args="(2,)", result="4", test=B),
    ]
    assert [(call.check.args, call.check.test) for call in linked_calls(calls, [A, B, C])] == [("(1,)", A), ("(2,)", B)]


def test_a_call_no_fail_to_pass_test_made_is_linked_to_none_and_dropped():
    """At collection, or in a test spelled otherwise than FAIL_TO_PASS: visible, so neither linked nor unseen."""
    calls = [
        _call(args="(1,)", test=None),
        _call(args="(2,)", result="4", test="tests/other.py::test_x"),
        _call(args="(3,)", result="6", test=A),
    ]
    assert [call.check.args for call in linked_calls(calls, [A, B])] == ["(3,)"]


def test_checks_spread_over_the_tests_that_made_the_calls():
    calls = [_call(args=f"({n},)", result=str(2 * n), test=A) for n in range(10)] + [
        _call(args="(20,)", result="40", test=B)
    ]
    assert [check.test for check in selected_checks(calls, 3)] == [A, B, A]


def test_checks_are_capped_and_taken_in_turn_from_each_function():
    calls = [_call(args=f"({n},)", result=str(2 * n)) for n in range(10)] + [
        _call("letters", f"('{c}',)", result=f"{{'{c}'}}") for c in "xyz"
    ]
    chosen = selected_checks(calls)
    assert len(chosen) == MAX_CHECKS
    assert [check.qualname for check in chosen[:6]] == ["double", "letters"] * 3
    assert [check.args for check in chosen if check.qualname == "double"] == ["(0,)", "(1,)", "(2,)", "(3,)", "(4,)"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, [False]),
        (5, [6, 4, 7, -5, 0]),
        (0, [1, -1, 2]),  # never the value itself
        (1.5, [3.0, 0.75, -1.5]),
        ("Ab", ["b", "A", "AB", "ab", "AAb", "Aba"]),
        ("", ["a"]),
        ("a=1;b", ["=1;b", "a=1;", "A=1;B", "aa=1;b", "a=1;ba", "a= =1;b", "a==1;b", "a=1; ;b", "a=1;;b"]),
        (b"xy", [b"y", b"x", b"xya"]),
        ({3, 1, 2}, [{2, 3}, {1, 3}, {1, 2}]),
        (None, []),
    ],
)
def test_scalars_strings_and_sets_step_to_nearby_values_of_their_type(value, expected):
    assert perturbed_values(value) == expected


def test_sequences_lose_repeat_or_change_an_element_or_are_reversed():
    found = perturbed_values([3, 1])
    assert {type(value) for value in found} == {list} and [3, 1] not in found
    for expected in ([1], [3], [1, 3], [3, 3, 1], [4, 1], [3, 2]):
        assert expected in found
    assert {type(value) for value in perturbed_values(("a", (1,)))} == {tuple}
    assert ("a", ()) in perturbed_values(("a", (1,)))  # an element changes, one level down
    assert perturbed_values([]) == []


def test_dicts_lose_a_key_or_change_the_first_value():
    found = perturbed_values({"a": 1, "b": 2})
    assert found[:2] == [{"b": 2}, {"a": 1}]
    assert {"a": 2, "b": 2} in found and {"a": 0, "b": 2} in found


def test_perturbed_calls_change_one_argument_and_repeat_no_recorded_call():
    calls = [
        _call(args="(1, 'x')", result="2", test=A),
        _call(args="(5, 'y')", kwargs="{'flag': True}", result="10", test=A),
    ]
    recorded = recorded_arguments(
        [
            {"module": "pkg.core", "qualname": "double", "args": "(1, 'x')", "kwargs": "{}"},
            {"module": "pkg.core", "qualname": "double", "args": "(5, 'y')", "kwargs": "{'flag': True}"},
            {
                "module": "pkg.core",
                "qualname": "double",
                "args": "(2.0, 'x')",
                "kwargs": "{}",
                "raises": "NotImplementedError",
            },
        ]
    )
    probes = perturbed_calls(calls, recorded, random.Random(0), limit=100)
    assert probes and all(probe.test is None and probe.result is None for probe in probes)
    arguments = [(ast.literal_eval(probe.args), ast.literal_eval(probe.kwargs)) for probe in probes]
    assert ((2, "x"), {}) not in arguments  # equal to a recorded call, whatever that call's outcome
    assert len(set(map(repr, arguments))) == len(arguments)
    for args, kwargs in arguments:
        assert any(
            _changed_arguments((args, kwargs), source) == 1 for source in [((1, "x"), {}), ((5, "y"), {"flag": True})]
        )


def _changed_arguments(call, source):
    """How many arguments of `call` differ from those of `source`; None when they do not line up."""
    (args, kwargs), (source_args, source_kwargs) = call, source
    if len(args) != len(source_args) or kwargs.keys() != source_kwargs.keys():
        return None
    return sum(a != b for a, b in zip(args, source_args)) + sum(kwargs[name] != source_kwargs[name] for name in kwargs)


def test_perturbed_calls_take_the_recorded_calls_in_turn_in_an_order_the_seed_fixes():
    calls = [_call(args="(1,)", test=A), _call(args="(100,)", result="200", test=A)]
    first = perturbed_calls(calls, {}, random.Random("task"), limit=4)
    assert first == perturbed_calls(calls, {}, random.Random("task"), limit=4)
    sources = [abs(ast.literal_eval(probe.args)[0]) < 50 for probe in first]
    assert sources == [True, False, True, False]


def _unseen(args, result=None, raises=None, qualname="double"):
    return _call(qualname, args, result=result, raises=raises, test=None)


def test_unseen_checks_prefer_new_answers_and_returned_values_and_raise_only_what_a_visible_test_shows():
    linked = [_call(args="(1,)", result="2", test=A), _call(args="('',)", result=None, raises="ValueError", test=A)]
    unseen = [
        _unseen("(3,)", result="2"),  # a visible answer: a table with that fallback passes it
        _unseen("(-1,)", raises="ValueError"),
        _unseen("(-2,)", raises="ValueError"),
        _unseen("(-4,)", raises="ValueError"),  # one raising check too many
        _unseen("(-3,)", raises="KeyError"),  # no visible test shows a KeyError
        _unseen("(4,)", result="8"),
    ]
    chosen = unseen_checks(unseen, linked, limit=4)
    assert [check.args for check in chosen] == ["(4,)", "(3,)", "(-1,)", "(-2,)"]
    internal = replace(_unseen("(-3,)", raises="KeyError"), internal=True)  # the library's own call, in a test
    assert "(-3,)" in [check.args for check in unseen_checks([*unseen[:1], internal], linked, limit=4)]
    assert len(unseen_checks([_unseen(f"({n},)", result=str(2 * n)) for n in range(10, 20)], linked)) == MAX_UNSEEN


@pytest.fixture(scope="module")
def minilib_units():
    layout = read_layout(MINILIB)
    return layout, {(unit.kind, unit.qualname): unit for unit in enumerate_units(layout)}


def test_functions_features_methods_and_classes_record_their_unit_modules_their_public_functions(minilib_units):
    layout, units = minilib_units
    function = delete_unit(layout, units["function", "clamp"], "stub")
    assert recorded_functions(function, layout.modules) == {"minilib.mathops": ["clamp"]}
    feature = delete_unit(layout, units["feature", "variance"], "remove")  # its private helper gives no checks
    assert recorded_functions(feature, layout.modules) == {"minilib.mathops": ["variance"]}
    module = delete_unit(layout, units["module", "minilib.textops"], "file")
    public = ["slugify", "wrap_words", "count_vowels", "title_case", "truncate"]
    assert recorded_functions(module, layout.modules) == {"minilib.textops": public}
    method = delete_unit(layout, units["method", "BoundedStack.push"], "stub")
    assert recorded_functions(method, layout.modules) == {"minilib.containers": ["BoundedStack.push"]}
    whole = delete_unit(layout, units["class", "BoundedStack"], "stub")  # recorded as one program per test
    assert recorded_functions(whole, layout.modules) == {"minilib.containers": ["BoundedStack"]}


PACKAGE = {
    "pkg/__init__.py": "from pkg.core import double\n",
    "pkg/core.py": """
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
""",
    "tests/test_core.py": """
import pkg
from pkg.core import factorial, letters, pop_last, quadruple
from pkg import core


TEN = core.double(5)  # at collection: made by no test


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
""",
}


def test_recorder_keeps_literal_calls_that_leave_their_arguments_alone_and_marks_the_librarys_own(tmp_path):
    """Calls the tests make are linked to them; recursion and the library's own calls are kept apart as internal; a
    call that mutated its literal argument, or whose argument no description stands for, is not recorded."""
    functions = {"pkg.core": ["double", "factorial", "quadruple", "pop_last", "letters", "fail"]}
    raw_calls = recorded_raw_calls(tmp_path, PACKAGE, functions)
    calls = [call for raw in raw_calls if (call := parsed_call(raw, functions))]
    direct = [call for call in calls if not call.internal]
    assert [(c.check.qualname, c.check.args, c.outcome) for c in direct] == [
        ("double", "(5,)", ("10", None, None, None)),
        ("double", "(3,)", ("6", None, None, None)),  # through the package's re-export
        ("factorial", "(4,)", ("24", None, None, None)),
        ("quadruple", "(1,)", ("4", None, None, None)),
        ("letters", "('aba',)", (canonical({"a", "b"}), None, None, None)),
        ("fail", "('k',)", (None, "KeyError", None, None)),
    ]
    assert [call.check.test for call in direct] == [
        None,
        *["tests/test_core.py::test_calls"] * 4,
        "tests/test_core.py::test_raises",
    ]
    internal = {(call.check.qualname, call.check.args) for call in calls if call.internal}
    assert internal == {("factorial", f"({n},)") for n in (1, 2, 3)} | {("double", "(1,)"), ("double", "(2,)")}


PROBED = """
def double(x):
    return 2 * x


def spin(x):
    while True:
        pass


def push(items):
    items.append(0)
    return len(items)


def shout(text):
    print("loud", text)
    return text.upper()


def increment(x):
    return x + 1


def opaque(x):
    return object()


def lookup(key):
    return {"a": 1}[key]


def hashed(text):
    return hash(text)
"""


def test_perturbed_calls_run_in_one_interpreter_and_keep_only_clean_reproducible_outcomes(tmp_path):
    """A call that loops is stopped after its time limit; one that mutates, returns no literal or raises TypeError
    gives nothing; one whose outcome depends on the hash seed does not reproduce."""
    (tmp_path / "probed.py").write_text(PROBED)
    sb = LocalSandbox(tmp_path)
    calls = [
        ("double", "(2,)"),
        ("spin", "(1,)"),
        ("push", "([1],)"),
        ("shout", "('a',)"),
        ("increment", "('a',)"),
        ("opaque", "(1,)"),
        ("lookup", "('b',)"),
        ("missing", "(1,)"),
        ("hashed", "('regrow',)"),
        ("double", "(3,)"),
    ]
    probes = [IoCheck(module="probed", qualname=name, args=args) for name, args in calls]
    started = time.monotonic()
    found = probed(sb, probes, set(), PROBE_BUDGET_S)
    assert time.monotonic() - started < PROBE_CALL_S + 5
    assert [(call.check.qualname, call.outcome) for call in found] == [
        ("double", ("4", None, None, None)),
        ("shout", ("'A'", None, None, None)),
        ("lookup", (None, "KeyError", None, None)),
        ("hashed", (repr(_hash_under("1")), None, None, None)),
        ("double", ("6", None, None, None)),
    ]
    assert all(call.check.test is None for call in found)
    assert [call.check.qualname for call in reproduced(sb, found)] == ["double", "shout", "lookup", "double"]


def _hash_under(seed):
    run = subprocess.run(
        [sys.executable, "-c", "print(hash('regrow'))"],
        env={**os.environ, "PYTHONHASHSEED": seed},
        capture_output=True,
        text=True,
    )
    return int(run.stdout)


def test_store_writes_io_checks_for_every_task_and_keeps_them_out_of_the_record(tmp_path):
    def record(identifier):
        return TaskRecord(
            instance_id=identifier,
            repo="r",
            source_commit="c",
            image="i",
            workspace_archive=f"workspaces/{identifier}.tar.gz",
            repo_dir="repos/r-c",
            mode="stub",
            deleted=[],
            problem_statement="p",
            FAIL_TO_PASS=["t"],
            PASS_TO_PASS=["u"],
            test_command="pytest",
            solution_patch="diff",
            test_files=[],
            stats=TaskStats(lines_deleted=1, covering_tests=1, complexity=1),
            created_at=datetime.now(UTC),
            synth_version="0",
        )

    check = IoCheck(module="pkg.core", qualname="double", args="(1,)", result="2")
    workspaces = {"with": b"with", "without": b"without"}
    write_store(
        tmp_path,
        [record("with"), record("without")],
        tmp_path,
        {"with": [check]},
        workspaces,
        RepoFiles("repos/r-c", b"i", None),
    )
    assert (tmp_path / "workspaces" / "with.tar.gz").read_bytes() == b"with"
    assert (tmp_path / "repos" / "r-c" / "install.tar.gz").read_bytes() == b"i"
    assert json.loads((tmp_path / "hidden" / "with" / "io_checks.json").read_text()) == [check.model_dump()]
    assert json.loads((tmp_path / "hidden" / "without" / "io_checks.json").read_text()) == []
    assert "double" not in (tmp_path / "tasks.jsonl").read_text()


METHODS = {
    "shop/__init__.py": "",
    "shop/cart.py": """
import threading


class Cart:
    def __init__(self, prices):
        self.prices = dict(prices)
        self.items = []

    def add(self, name, count=1):
        if name not in self.prices:
            raise KeyError(name)
        self.items.extend([name] * count)
        return len(self.items)


class Locked:
    def __init__(self):
        self.lock = threading.Lock()

    def add(self, x):
        return x
""",
    "tests/test_cart.py": """
from shop.cart import Cart, Locked


def test_add():
    cart = Cart({"apple": 3})
    assert cart.add("apple", 2) == 2
    assert cart.add("apple") == 3


def test_unknown():
    cart = Cart({"apple": 3})
    try:
        cart.add("pear")
    except KeyError:
        pass


def test_unpicklable_receiver():
    assert Locked().add(1) == 1
""",
}


def test_a_methods_calls_keep_the_receiver_before_and_its_state_after_and_replay_on_a_fresh_object(tmp_path):
    """A method's check carries its receiver as it was (a pickle) and its literal attributes after the call; a
    receiver that does not pickle gives no check; replayed in a fresh interpreter, the outcome and state agree."""
    functions = {"shop.cart": ["Cart.add", "Locked.add"]}
    raw_calls = recorded_raw_calls(tmp_path, METHODS, functions)
    calls = [parsed_call(raw, functions) for raw in raw_calls if "receivers" not in raw]  # not the receiver pools
    assert [(c.check.qualname, c.check.args, c.outcome) for c in calls if c] == [
        ("Cart.add", "('apple', 2)", ("2", None, canonical({"prices": {"apple": 3}, "items": ["apple"] * 2}), None)),
        ("Cart.add", "('apple',)", ("3", None, canonical({"prices": {"apple": 3}, "items": ["apple"] * 3}), None)),
        ("Cart.add", "('pear',)", (None, "KeyError", canonical({"prices": {"apple": 3}, "items": []}), None)),
    ]
    assert all(call and call.check.inputs for call in calls)
    replayed = reproduced(LocalSandbox(tmp_path), [call for call in calls if call])
    assert [call.check.args for call in replayed] == ["('apple', 2)", "('apple',)", "('pear',)"]


def test_a_methods_unseen_calls_keep_its_receiver():
    inputs = "gAR9lC4="  # a pickle: any inputs text
    call = parsed_call(
        {
            "module": "shop.cart",
            "qualname": "Cart.add",
            "args": "('apple', 2)",
            "kwargs": "{}",
            "result": "2",
            "raises": None,
            "test": "tests/test_cart.py::test_add",
            "inputs": inputs,
            "state": "{'items': []}",
        },
        {"shop.cart": ["Cart.add"]},
    )
    assert call is not None
    probes = perturbed_calls([call], {}, random.Random(0), limit=5)
    assert probes and all(p.inputs == inputs and p.qualname == "Cart.add" for p in probes)


def test_a_method_call_without_its_inputs_or_state_is_dropped():
    raw = {"module": "shop.cart", "qualname": "Cart.add", "args": "(1,)", "kwargs": "{}", "result": "1"}
    assert parsed_call({**raw, "state": "{}"}, {"shop.cart": ["Cart.add"]}) is None
    assert parsed_call({**raw, "inputs": "eA=="}, {"shop.cart": ["Cart.add"]}) is None


OBJECTS = {
    "wire/__init__.py": "",
    "wire/reader.py": """
import enum


class Kind(enum.Enum):
    WORD = 1


class Buffer:
    def __init__(self, data):
        self.data = bytearray(data)


class Token:
    def __init__(self, text, kind):
        self.text, self.kind = text, kind


class NEED_DATA:
    pass


def take(buf, n):
    if len(buf.data) < n:
        return NEED_DATA
    out = bytes(buf.data[:n])
    del buf.data[:n]
    return Token(out, Kind.WORD)
""",
    "tests/test_reader.py": """
from wire.reader import NEED_DATA, Buffer, take


def test_take():
    buf = Buffer(b"hello")
    assert take(buf, 2).text == b"he"
    assert take(buf, 9) is NEED_DATA
""",
}


def test_calls_with_objects_keep_their_arguments_as_a_pickle_and_describe_results_and_what_they_consumed(tmp_path):
    """Arguments that are no literals travel as a pickle; the object returned, the class returned as a sentinel
    and the buffer the call consumed are described (class and attributes), and a fresh interpreter agrees."""
    functions = {"wire.reader": ["take"]}
    calls = [call for raw in recorded_raw_calls(tmp_path, OBJECTS, functions) if (call := parsed_call(raw, functions))]
    assert [(call.check.args, call.check.result) for call in calls] == [
        ("()", repr(("object", "Token", {"kind": ("enum", "Kind", "WORD"), "text": b"he"}))),
        ("()", repr(("class", "wire.reader.NEED_DATA"))),
    ]
    buffer_after = ("object", "Buffer", {"data": ("bytearray", b"llo")})
    assert calls[0].check.args_after == repr(((buffer_after, 2), {}))
    assert all(call.check.inputs and call.check.state is None for call in calls)
    assert perturbed_calls(calls, {}, random.Random(0)) == []  # pickled arguments are not perturbed
    assert [call.check.result for call in reproduced(LocalSandbox(tmp_path), calls)] == [c.check.result for c in calls]


def test_a_mutant_written_within_the_same_second_as_the_last_is_run_not_its_cached_bytecode(tmp_path, monkeypatch):
    """`<` and `>` give mutants of the same size: a bytecode cache keyed on mtime and size would replay the last."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # the sandbox's interpreter writes bytecode
    sb = LocalSandbox(tmp_path)
    check = IoCheck(module="cmp", qualname="below", args="(0,)")
    outcomes = []
    for source in ("def below(x):\n    return x < 1\n", "def below(x):\n    return x > 1\n"):
        (tmp_path / "cmp.py").write_text(source)
        (found,) = call_outcomes(sb, [check], "0", 5.0, 30.0)
        outcomes.append(found.outcome if found else None)
    assert outcomes == [("True", None, None, None), ("False", None, None, None)]


def test_a_function_reached_through_a_module_level_table_is_recorded(tmp_path):
    """`TABLE = {"d": double}` holds the function object itself: the recorder points the table at its wrapper."""
    files = {
        "calc2/__init__.py": "",
        "calc2/core.py": "def double(x):\n    return 2 * x\n\n\nTABLE = {'d': double}\n\n\n"
        "def run(name, x):\n    return TABLE[name](x)\n",
        "tests/test_core.py": "from calc2.core import run\n\n\ndef test_run():\n    assert run('d', 4) == 8\n",
    }
    functions = {"calc2.core": ["double"]}
    calls = [call for raw in recorded_raw_calls(tmp_path, files, functions) if (call := parsed_call(raw, functions))]
    assert [(call.check.args, call.outcome[0], call.internal) for call in calls] == [("(4,)", "8", True)]


def test_a_recording_run_gets_a_few_times_the_tests_own_time_not_the_suite_timeout():
    """cachetools' TTLCache group: recording its F2P tests crawled past six minutes under the 600 s suite limit."""
    from types import SimpleNamespace

    from task_synth.candidates.deletion import delete_unit
    from task_synth.candidates.units import enumerate_units
    from task_synth.repository.repo_layout import read_layout
    from task_synth.settings import SynthSettings
    from task_synth.validation.io_recording import RECORDING_FACTOR, RECORDING_MIN_S, record_io_checks

    class Crawling:
        def __init__(self):
            self.timeouts: list[float] = []

        def write_file(self, path, data):
            pass

        def exec(self, command, timeout, cwd=None, env=None):
            self.timeouts.append(timeout)
            return SimpleNamespace(timed_out=True, exit_code=124, stdout="", stderr="")

    layout = read_layout(Path(__file__).parents[1] / "fixtures" / "minilib")
    unit = next(u for u in enumerate_units(layout) if u.qualname == "gcd")
    deletion = delete_unit(layout, unit, "stub")
    settings = SynthSettings(test_timeout_s=600)
    for tests_s, expected in ((2.0, RECORDING_MIN_S), (30.0, 30.0 * RECORDING_FACTOR), (None, 600)):
        sandbox = Crawling()
        recording = record_io_checks(sandbox, deletion, layout, ["tests/test_mathops.py::test_gcd"], settings, tests_s)
        assert recording.checks == [] and sandbox.timeouts == [expected], (tests_s, sandbox.timeouts)


GROWING = {
    "bag/__init__.py": "",
    "bag/store.py": """
class Bag:
    pickles = 0

    def __init__(self):
        self.items = []

    def __getstate__(self):
        Bag.pickles += 1
        return self.__dict__

    def add(self, item):
        self.items.append(item)
        return len(self.items)
""",
    "tests/test_bag.py": """
from bag.store import Bag


def test_a_bag_grown_call_by_call():
    bag = Bag()
    for n in range(2000):
        assert bag.add("x" * 50 + str(n)) == n + 1
    # Each add pickled and described its receiver whole: 2000 times a bag of up to 100 KB, a run that crawls.
    assert Bag.pickles < 100, Bag.pickles


def test_a_small_bag():
    assert Bag().add("y") == 1
""",
}


def test_a_receiver_that_grows_past_the_pickle_limit_is_not_pickled_at_every_call(tmp_path):
    """A test that grows a big receiver call by call is recorded until the receiver's state is too long to describe;
    after a few such calls its later calls are not examined (a recording run of cachetools' TLRU tests took 74 s, not
    0.7 s). The next test is recorded again."""
    functions = {"bag.store": ["Bag.add"]}
    raw_calls = recorded_raw_calls(tmp_path, GROWING, functions)
    calls = [call for raw in raw_calls if (call := parsed_call(raw, functions))]
    by_test: dict[str | None, int] = {}
    for call in calls:
        by_test[call.check.test] = by_test.get(call.check.test, 0) + 1
    assert by_test["tests/test_bag.py::test_a_small_bag"] == 1
    assert 30 <= by_test["tests/test_bag.py::test_a_bag_grown_call_by_call"] < 100


PEEKABLE_FILES = {
    "look/__init__.py": "",
    "look/ahead.py": """
from collections import deque


class Peekable:
    def __init__(self, iterable):
        self._it = iter(iterable)
        self._cache = deque()

    def peek(self, default=None):
        if not self._cache:
            try:
                self._cache.append(next(self._it))
            except StopIteration:
                return default
        return self._cache[0]
""",
    "tests/test_ahead.py": """
from look.ahead import Peekable


def test_peek():
    items = Peekable([1, 2])
    assert items.peek() == 1
    assert Peekable(range(3, 6)).peek() == 3
    assert Peekable("").peek("none") == "none"
""",
}


def test_a_receiver_holding_an_iterator_and_a_deque_is_described_by_what_is_left_to_draw(tmp_path):
    """An object that iterates over its input (more-itertools' peekable) had no describable state: no check."""
    functions = {"look.ahead": ["Peekable.peek"]}
    raw = recorded_raw_calls(tmp_path, PEEKABLE_FILES, functions)
    calls = [call for item in raw if (call := parsed_call(item, functions))]
    assert sorted(call.check.state for call in calls) == [
        "{'_cache': ('deque', [1], None), '_it': ('iterator', (2,))}",
        "{'_cache': ('deque', [3], None), '_it': ('iterator', ('range', 4, 6, 1))}",
        "{'_cache': ('deque', [], None), '_it': ('iterator', ())}",
    ]
    assert len(reproduced(LocalSandbox(tmp_path), calls)) == 3


QUEUE_FILES = {
    "q/__init__.py": "",
    "q/events.py": """
class Queue:
    def __init__(self):
        self.waiting = []

    def receive(self, data):
        self.waiting.extend(data.split(","))

    def next_event(self):
        return self.waiting.pop(0) if self.waiting else "NEED_DATA"
""",
    "tests/test_events.py": """
from q.events import Queue


def test_events():
    queue = Queue()
    queue.receive("a,b")
    queue.receive("c")
    assert queue.next_event() == "a"
    queue.receive("d,e")
    assert [queue.next_event() for _ in range(5)] == ["b", "c", "d", "e", "NEED_DATA"]
""",
}


def test_a_method_with_no_argument_is_called_on_states_its_tests_reach_through_the_other_methods(tmp_path):
    """`next_event()` has nothing to vary: its unseen calls run it on the states the other methods' calls stood on,
    which no visible call of it saw (h11's Connection had no secret check before)."""
    functions = {"q.events": ["Queue.next_event"]}
    raw = recorded_raw_calls(tmp_path, QUEUE_FILES, functions)
    pools = receiver_pools(raw)
    assert len(pools[("q.events", "Queue")]) == 3  # before each `receive`
    calls = [call for item in raw if (call := parsed_call(item, functions))]
    probes = perturbed_calls(calls, recorded_arguments(raw), random.Random(0), receivers=pools)
    assert probes and all(probe.args == "()" and probe.inputs in pools[("q.events", "Queue")] for probe in probes)
    found = [call for call in call_outcomes(LocalSandbox(tmp_path), probes, "1", 1.0, 30.0) if call]
    # The empty queue is a state a visible call saw (the last one): that call is no unseen one.
    assert sorted((call.check.result, call.check.state) for call in found) == [
        ("'a'", "{'waiting': ['b']}"),
        ("'b'", "{'waiting': ['c']}"),
    ]
    assert has_secret_evidence(unseen_checks(found, linked_calls(calls, ["tests/test_events.py::test_events"])))


def test_a_call_that_draws_random_numbers_is_no_check_even_where_it_is_seeded(tmp_path):
    """more-itertools' sample: a test that seeds `random` gets the same sample twice, so its calls agreed under two
    hash seeds, and a replay matched by chance (a shuffle of five items); graded in a fresh process, the task's own
    code earned 0. A call that moves `random`'s state has no outcome a replay stands by: not even a seeded shuffle,
    which reproduces, but which an honest rewrite drawing in another order fails."""
    files = {
        "lot/__init__.py": "",
        "lot/draw.py": "import random\n\n\ndef shuffled(items, seed):\n    random.seed(seed)\n"
        "    items = list(items)\n    random.shuffle(items)\n    return items\n\n\n"
        "def first(items):\n    return items[0]\n",
        "tests/test_draw.py": "from lot.draw import first, shuffled\n\n\ndef test_draw():\n"
        "    assert sorted(shuffled('abcde', 7)) == list('abcde')\n    assert first(['a', 'b']) == 'a'\n",
    }
    functions = {"lot.draw": ["shuffled", "first"]}
    raw = recorded_raw_calls(tmp_path, files, functions)
    calls = [call for item in raw if (call := parsed_call(item, functions))]
    assert sorted(call.check.qualname for call in calls) == ["first", "shuffled"]
    assert [call.check.qualname for call in reproduced(LocalSandbox(tmp_path), calls)] == ["first"]


BUCKET_FILES = {
    "sort/__init__.py": "",
    "sort/buckets.py": """
from collections import defaultdict, deque


class Bucket:
    def __init__(self, iterable, key, validator=None):
        self._it = iter(iterable)
        self._key = key
        self._cache = defaultdict(deque)
        self._validator = validator or (lambda x: True)

    def fill(self):
        for item in self._it:
            self._cache[self._key(item)].append(item)

    def count(self, value):
        return len(self._cache[value]) if self._validator(value) else 0
""",
    "tests/test_buckets.py": """
from sort.buckets import Bucket


def test_count():
    bucket = Bucket([10, 11, 20], key=lambda x: x // 10)
    bucket.fill()
    assert bucket.count(1) == 2
    assert Bucket([5], key=abs, validator=lambda x: x > 9).count(5) == 0
""",
}


def test_a_receiver_holding_lambdas_and_a_defaultdict_is_pickled_and_described(tmp_path):
    """more-itertools' bucket holds the test's key lambda, a lambda of its own and a defaultdict of deques: its
    receiver did not pickle and its state had no description, so its methods made no check."""
    functions = {"sort.buckets": ["Bucket.count"]}
    raw = recorded_raw_calls(tmp_path, BUCKET_FILES, functions)
    calls = [call for item in raw if (call := parsed_call(item, functions))]
    states = sorted(call.check.state for call in calls)
    assert len(states) == 2, raw
    assert "('defaultdict', ('class', 'collections.deque'), {1: ('deque', [10, 11], None)" in states[0]
    assert "'_key': ('function', 'test_buckets.test_count.<locals>.<lambda>')" in states[0], states[0]
    assert len(reproduced(LocalSandbox(tmp_path), calls)) == 2
