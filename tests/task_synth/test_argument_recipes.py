"""Arguments no literal spells (functions, ranges, iterators) recorded as recipes, replayed alike and varied into
unseen calls (no Docker)."""

import ast
import inspect
import itertools
import math
import operator
import random

import pytest

from env_server.grading.checks import judge
from proto.call_replay import replay
from proto.call_values import built
from proto.evidence import has_secret_evidence
from task_synth.validation.call_runs import call_outcomes, reproduced
from task_synth.validation.inside.argument_recipes import recipe_texts, unchanged_literals
from task_synth.validation.recorded_calls import linked_calls, parsed_call
from task_synth.validation.unseen_calls import (
    perturbed_calls,
    perturbed_recipes,
    plain_marks,
    recorded_arguments,
    unseen_checks,
)
from tests.task_synth.recorder_runs import LocalSandbox, importable_module, recorded_raw_calls

SCALE = 10


def _recipes(*args, **kwargs):
    texts = recipe_texts(args, kwargs, set())
    assert texts is not None, args
    return ast.literal_eval(texts[0]), ast.literal_eval(texts[1])


def _rebuilt(value):
    (recipe,), _ = _recipes(value)
    return built(recipe)


def test_a_function_is_rebuilt_by_value_with_its_defaults_closure_and_the_globals_it_reads():
    offset = 3

    def helper(value, *, times=2):
        return math.floor(value) * times * SCALE

    def lambda_with_all(x, y=2):
        return helper(x, times=y) + offset

    rebuilt = _rebuilt(lambda_with_all)
    assert rebuilt is not lambda_with_all
    assert [rebuilt(1.5), rebuilt(2.5, 3)] == [lambda_with_all(1.5), lambda_with_all(2.5, 3)] == [23, 63]
    assert (rebuilt.__module__, rebuilt.__qualname__) == (lambda_with_all.__module__, lambda_with_all.__qualname__)
    assert _rebuilt(lambda *args, key=len: sorted(args, key=key))("bb", "a") == ["a", "bb"]


def test_named_objects_ranges_and_fresh_iterators_are_recipes_and_what_has_none_is_refused():
    (add, upper, length, module, span, drawn), _ = _recipes(
        operator.add, str.upper, len, math, range(2, 9, 3), iter("ab")
    )
    assert [add, upper, length, module] == [
        ("ref", "_operator", "add"),
        ("ref", "builtins", "str.upper"),
        ("ref", "builtins", "len"),
        ("module", "math"),
    ]
    assert (span, drawn) == (("range", 2, 9, 3), ("iter", ("lit", "ab")))
    assert list(built(("iter", ("lit", [1, 2])))) == [1, 2]
    started = iter([1, 2, 3])
    next(started)
    generator = (n for n in range(3))

    class Local:
        pass

    assert [recipe_texts((value,), {}, set()) for value in (started, generator, Local(), open(__file__))] == [None] * 4


def test_a_signature_is_a_recipe_that_builds_an_equal_signature():
    """toolz's check_arity and check_partial take what inspect.signature gave; before, no recipe spelled one, so the
    library's own calls of them were never checks."""

    def spread(a, b: int = 2, *rest, key=len, **named) -> list:
        return [a, b, rest, key, named]

    for function in (spread, lambda x, y=None: x, operator.add, len):
        try:
            signature = inspect.signature(function)
        except ValueError:  # a builtin without a signature
            continue
        (recipe,), _ = _recipes(signature)
        assert recipe[0] == "signature"
        assert built(recipe) == signature and str(built(recipe)) == str(signature)


def test_a_partial_is_a_recipe_of_its_function_and_bound_arguments_and_varies_by_either():
    """toolz's tests pass `partial(map, inc)`; before, no recipe spelled a partial, so such a call was no check."""
    import functools

    partial = functools.partial(max, 3, key=abs)
    (recipe,), _ = _recipes(partial)
    assert recipe == ("partial", ("ref", "builtins", "max"), (("lit", 3),), (("key", ("ref", "builtins", "abs")),))
    rebuilt = built(recipe)
    assert type(rebuilt) is functools.partial and rebuilt(-5) == -5 and rebuilt(1) == 3
    varied = perturbed_recipes(recipe, [("ref", "builtins", "max"), ("ref", "builtins", "min")])
    assert ("partial", ("ref", "builtins", "min"), (("lit", 3),), recipe[3]) in varied
    assert any(item[1] == recipe[1] and item[2] != recipe[2] for item in varied)


def add_scale(value):
    return value + SCALE


def test_a_function_of_a_test_module_travels_by_value_and_what_it_reads_must_too():
    """A test module is not importable in a grading container: its functions are code, never refs."""
    (recipe,), _ = _recipes(add_scale)
    assert (recipe[0], recipe[2], recipe[-1]) == ("code", "add_scale", (("SCALE", ("lit", 10)),))
    assert _recipes(pytest.raises)[0][0][0] == "ref"  # an installed package's: a ref
    unbuildable = object()
    assert recipe_texts((lambda: unbuildable,), {}, set()) is None


def test_the_literal_part_of_recipe_arguments_must_be_left_as_it_was():
    items = [3, 1]
    texts = recipe_texts((items, len), {}, set())
    assert unchanged_literals((items, len), {}, *texts)
    items.append(2)
    assert not unchanged_literals((items, len), {}, *texts)


def test_recipes_vary_into_calls_no_test_makes():
    inc, double = ("ref", "m", "inc"), ("code", "t", "<lambda>", "AA==", None, None, (), ())
    assert perturbed_recipes(inc, [inc, double]) == [double]
    assert ("range", 0, 6, 1) in perturbed_recipes(("range", 0, 5, 1), [])
    assert ("iter", ("lit", [2])) in perturbed_recipes(("iter", ("lit", [1, 2])), [])
    assert perturbed_recipes(("list", (inc, double)), []) == [
        ("list", (double,)),
        ("list", (inc,)),
        ("list", (double, inc)),
    ]
    assert plain_marks((("lit", 1), inc), {"k": ("lit", "a")}) == ((1, inc), {"k": "a"})


FUNCTIONS = {"fn.core": ["arity", "apply_twice", "chunked"]}
ORIGINAL = """
import inspect


def arity(function):
    return len(inspect.signature(function).parameters)


def apply_twice(function, value):
    return function(function(value))


def chunked(iterable, size):
    chunk = []
    for item in iterable:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
"""
TESTS = """
from fn.core import apply_twice, arity, chunked

BASE = 10


def add_base(x):
    return x + BASE


def test_arity():
    assert arity(lambda: 0) == 0
    assert arity(lambda x, y: x) == 2
    assert arity(add_base) == 1


def test_apply_twice():
    assert apply_twice(lambda x: x * 3, 2) == 18
    assert apply_twice(add_base, 1) == 21
    assert apply_twice(str.upper, "a") == "A"
    assert apply_twice(lambda x, step=1: x + step, 0) == 2


def test_chunked():
    assert list(chunked(range(5), 2)) == [[0, 1], [2, 3], [4]]
    assert list(chunked(iter([1, 2, 3]), 3)) == [[1, 2, 3]]
"""
FILES = {"fn/__init__.py": "", "fn/core.py": ORIGINAL, "tests/test_fn.py": TESTS}
TABLE = """
def arity(function):
    return {0: 0, 2: 2}.get(function.__code__.co_argcount, 1)


def apply_twice(function, value):
    return {2: 18, 1: 21, "a": "A", 0: 2}[value]


def chunked(iterable, size):
    yield from [[0, 1], [2, 3], [4]] if size == 2 else [[1, 2, 3]]
"""
HONEST = """
import inspect


def arity(function):
    spec = inspect.getfullargspec(function)
    return len(spec.args) + len(spec.kwonlyargs) + (spec.varargs is not None) + (spec.varkw is not None)


def apply_twice(function, value):
    for _ in range(2):
        value = function(value)
    return value


def chunked(iterable, size):
    items = list(iterable)
    if size < 1:  # no chunk is ever full: all of it at the end
        yield from [items] if items else []
        return
    for start in range(0, len(items), size):
        yield items[start : start + size]
"""


@pytest.fixture
def recorded(tmp_path):
    raw = recorded_raw_calls(tmp_path, FILES, FUNCTIONS)
    calls = [call for item in raw if (call := parsed_call(item, FUNCTIONS))]
    return tmp_path, raw, calls


def test_calls_that_pass_functions_ranges_and_iterators_are_recorded_as_recipes_and_replay_alike(recorded):
    tmp_path, _, calls = recorded
    assert {(c.check.qualname, c.check.recipes) for c in calls} == {
        ("arity", True),
        ("apply_twice", True),
        ("chunked", True),
    }
    assert len(calls) == 9
    assert len(reproduced(LocalSandbox(tmp_path), calls)) == len(calls)


def test_unseen_calls_swap_functions_and_vary_ranges_so_that_every_function_has_secret_evidence(recorded):
    tmp_path, raw, calls = recorded
    probes = perturbed_calls(calls, recorded_arguments(raw), random.Random(0))
    outcomes = [c for c in call_outcomes(LocalSandbox(tmp_path), probes, "1", 1.0, 30.0) if c is not None]
    unseen = unseen_checks(outcomes, linked_calls(calls, ["tests/test_fn.py::" + t for t in ("a",)]), limit=24)
    by_function = {name: [c for c in unseen if c.qualname == name] for name in FUNCTIONS["fn.core"]}
    assert all(has_secret_evidence(checks) for checks in by_function.values()), by_function
    visible = {(c.check.qualname, c.check.args) for c in calls}
    assert not any((c.qualname, c.args) in visible for c in unseen)


@pytest.mark.parametrize(("source", "passes"), [(ORIGINAL, True), (HONEST, True), (TABLE, False)])
def test_an_honest_rewrite_passes_the_unseen_checks_and_a_table_of_the_visible_answers_fails(
    recorded, tmp_path_factory, monkeypatch, source, passes
):
    tmp_path, raw, calls = recorded
    probes = perturbed_calls(calls, recorded_arguments(raw), random.Random(0))
    unseen = [c.check for c in call_outcomes(LocalSandbox(tmp_path), probes, "1", 1.0, 30.0) if c is not None]
    importable_module(tmp_path_factory.mktemp("rewrite"), monkeypatch, "fn.core", source)
    verdicts = [judge(c, replay({**c.model_dump(), "beside": None}, 5.0)) for c in unseen]
    assert all(v.outcome == "passed" for v in verdicts) is passes, [
        (c.qualname, c.args[-60:], v.outcome) for c, v in zip(unseen, verdicts, strict=True) if v.outcome != "passed"
    ]
    assert len(list(itertools.islice(verdicts, 3))) == 3
