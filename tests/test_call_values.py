"""The one description of a call's values (proto/call_values.py) that synthesis, grading containers and the grader
share: what stands for what, and what has no description."""

from __future__ import annotations

import ast
import enum
import math

import pytest

from proto.call_values import described_text, literal_text, state_text


class Color(enum.Enum):
    RED = 1


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self):
        self.a, self.b = 1, [b"x"]


class Plain:
    def __init__(self):
        self.handler = len
        self.kind = Color.RED
        self.sentinel = Slotted
        self.buffer = bytearray(b"ab")


def reader(data):
    return data


@pytest.mark.parametrize("value", [0, -2.5, "s", b"b", None, True, [1, (2, {"k": {3}})], set()])
def test_a_literal_is_its_own_description(value):
    assert described_text(value) == repr(value) and ast.literal_eval(described_text(value) or "") == value


def test_a_frozenset_which_no_literal_spells_is_described_by_its_set():
    assert ast.literal_eval(described_text(frozenset({1, 2})) or "") == ("frozenset", {1, 2})


def test_objects_are_their_class_and_attributes_and_functions_and_classes_their_names():
    described = ast.literal_eval(described_text(Plain()) or "")
    assert described == (
        "object",
        "Plain",
        {
            "buffer": ("bytearray", b"ab"),
            "handler": ("function", "builtins.len"),
            "kind": ("enum", "Color", "RED"),
            "sentinel": ("class", f"{__name__}.Slotted"),
        },
    )
    assert ast.literal_eval(described_text({"read": reader}) or "") == {"read": ("function", f"{__name__}.reader")}
    assert ast.literal_eval(described_text(Slotted()) or "") == ("object", "Slotted", {"a": 1, "b": [b"x"]})


def test_a_receivers_state_is_its_attributes_slots_too():
    assert ast.literal_eval(state_text(Slotted()) or "") == {"a": 1, "b": [b"x"]}
    assert state_text(3) is None


def test_generators_cycles_and_the_too_deep_have_no_description():
    looped: list = []
    looped.append(looped)
    deep: list = []
    for _ in range(20):
        deep = [deep]
    assert described_text(x for x in "ab") is None
    assert described_text(looped) is None and described_text(deep) is None
    assert described_text(math.inf) == repr(("float", "inf"))


def test_literal_text_keeps_to_exact_literal_types():
    class Number(int):
        pass

    assert literal_text(Number(3)) is None and literal_text(3) == "3"


class _Counted:
    """An object that counts how often its attributes are read, to see how much of a value a description walks."""

    reads = 0

    def __init__(self, n):
        self.n = n

    def __getattribute__(self, name):
        if name == "__dict__":
            _Counted.reads += 1
        return object.__getattribute__(self, name)


def test_a_value_too_big_to_describe_is_refused_before_it_is_walked_whole():
    big = [_Counted(n) for n in range(20_000)]
    _Counted.reads = 0
    assert described_text(big) is None and described_text(big[:3]) is not None
    assert _Counted.reads < 5_000  # the description's limit, not the list's length


class _Row(dict):
    pass


class _Name(str):
    def __str__(self):  # an override the description reads past
        return "always this"


def test_a_subclass_of_a_builtin_is_described_by_what_it_holds_as_well_as_its_attributes():
    """Before, an OrderedDict, a Counter or a `class Row(dict)` was its class and attributes alone: every instance
    described alike, so a stub returning an empty one matched any expected value; a namedtuple had no description."""
    import collections

    assert described_text(collections.OrderedDict(a=1)) != described_text(collections.OrderedDict())
    assert described_text(collections.OrderedDict(a=1, b=2)) != described_text(collections.OrderedDict(b=2, a=1))
    assert described_text(collections.Counter("aab")) == "('Counter', {'a': 2, 'b': 1})"
    assert described_text(_Row(a=1)) == "('object', '_Row', {}, {'a': 1})"
    assert described_text(_Row(a=1)) != described_text(_Row(a=2))
    assert described_text(_Name("x")) == "('object', '_Name', {}, 'x')"
    point = collections.namedtuple("Point", "x y")
    assert described_text(point(1, 2)) == "('object', 'Point', {}, (1, 2))"
    factory = collections.defaultdict(list, {1: [2]})
    assert described_text(factory) == "('defaultdict', ('class', 'builtins.list'), {1: [2]})"


def test_a_receiver_of_a_builtin_subclass_shows_its_items_in_its_state():
    first, second = _Row(a=1), _Row(a=2)
    first.seen = second.seen = 3
    assert state_text(first) == "{'seen': 3, '__held__': {'a': 1}}"
    assert state_text(first) != state_text(second)


def test_a_subclass_of_an_interpreter_made_class_is_described_by_what_that_class_holds():
    """A `class Stamp(datetime.date)` (pendulum's DateTime is one) was `('object', 'Stamp', {})` whatever its date,
    and an exception returned as a value lost its args: a stub returning any instance matched."""
    import collections
    import datetime
    import typing

    class Stamp(datetime.date):
        pass

    class Problem(ValueError):
        pass

    class Line(collections.deque):
        pass

    assert described_text(Stamp(2020, 1, 2)) != described_text(Stamp(2021, 1, 2))
    assert described_text(Problem("bad", 3)).endswith("Problem', {}, (('bad', 3),))")
    assert described_text(Line([1, 2])) != described_text(Line([1, 3]))

    class Box(typing.Generic[typing.TypeVar("T")]):  # a base that holds no data adds nothing
        def __init__(self):
            self.size = 1

    assert described_text(Box()).endswith("Box', {'size': 1})")


class _Pair:
    __slots__ = ("__right", "left")

    def __init__(self, left, right):
        self.left, self.__right = left, right


class _NamedPair(_Pair):  # no slots of its own: it has a __dict__ too
    pass


def test_slots_count_beside_a_dict_and_private_slots_by_their_mangled_names():
    """Before, a subclass with a `__dict__` of a class with slots was described by the dict alone: the slots'
    values, the base's whole state, never showed."""
    pair = _NamedPair(1, 2)
    pair.name = "p"
    assert described_text(pair) == "('object', '_NamedPair', {'_Pair__right': 2, 'left': 1, 'name': 'p'})"
    assert described_text(_Pair(1, 2)) != described_text(_Pair(1, 3))


def test_an_exception_or_a_partial_returned_as_a_value_is_described_by_what_it_holds():
    """An interpreter-made class with a `__dict__` was described by that dict alone: `ValueError("a")` and
    `ValueError("b")`, or any two partials, read alike. An iterator still has none: a rewrite may return a generator."""
    import functools

    assert described_text(ValueError("a")) != described_text(ValueError("b"))
    assert described_text(functools.partial(max, 1)) != described_text(functools.partial(max, 2))
    assert described_text(map(abs, [1])) is None
