"""A deleted class recorded as programs, one per test, replayed anew and judged by what the tests see (no Docker)."""

import random

from env_server.grading.checks import judge
from proto.call_replay import replay_program
from proto.tasks import IoCheck
from task_synth.validation.call_runs import call_outcomes, reproduced
from task_synth.validation.recorded_calls import parsed_call, raised_in
from task_synth.validation.unseen_calls import perturbed_calls, recorded_arguments
from tests.task_synth.recorder_runs import LocalSandbox, importable_module, recorded_raw_calls

FUNCTIONS = {"geo.vec": ["Vec"]}
READS = ["x", "y", "norm1", "append", "count"]  # as the tests' files would give them: some are no attribute of Vec
FILES = {
    "geo/__init__.py": "",
    "geo/vec.py": """
class Vec:
    made = 0

    def __init__(self, x, y):
        if not isinstance(x, int):
            raise ValueError("x")
        self._x, self._y = x, y
        self._history = []

    @property
    def x(self):
        return self._x

    @property
    def y(self):
        return self._y

    @property
    def norm1(self):
        return abs(self._x) + abs(self._y)

    @classmethod
    def origin(cls):
        return cls(0, 0)

    def __add__(self, other):
        return Vec(self._x + other.x, self._y + other.y)

    def __eq__(self, other):
        return isinstance(other, Vec) and (self._x, self._y) == (other.x, other.y)

    __hash__ = None

    def scale(self, factor):
        self._history.append(factor)
        self._x, self._y = self._x * factor, self._y * factor
        return self

    def apply(self, function):
        return function(self._x)

    def steps(self):
        return iter(range(self.norm1))


class Sub(Vec):
    pass
""",
    "tests/test_vec.py": """
import pytest
from geo.vec import Sub, Vec


def test_add():
    a, b = Vec(1, 2), Vec(3, 4)
    assert a + b == Vec(4, 6)
    assert (a + b).norm1 == 10


def test_scale_and_read():
    v = Vec.origin()
    v.scale(3)
    w = Vec(2, -1).scale(2)
    assert (w.x, w.y) == (4, -2)
    assert list(w.steps()) == list(range(6))


def test_bad():
    with pytest.raises(ValueError):
        Vec("a", 1)


def test_unspellable_ends_the_program():
    v = Vec(5, 1)
    assert v.norm1 == 6
    assert v.apply(lambda x: x * 2) == 10
    v.scale(2)


def test_subclass_is_not_recorded():
    assert Sub(1, 1).norm1 == 2
""",
}


def _programs(tmp_path):
    raw = recorded_raw_calls(tmp_path, FILES, FUNCTIONS, READS)
    return {item["test"].rpartition("::")[2]: item for item in raw}, raw


def test_each_test_is_one_program_of_the_steps_made_from_outside_the_class(tmp_path):
    """`new`, `call` and `get` steps made by the test; the class's own calls inside (`__add__` making a Vec, the
    property reads inside `__add__`) are not steps; an instance made earlier is a reference, not a value."""
    programs, _ = _programs(tmp_path)
    assert set(programs) == {"test_add", "test_scale_and_read", "test_bad", "test_unspellable_ends_the_program"}
    add = eval(programs["test_add"]["steps"])  # literal text: the test reads it back
    assert add == (
        ("new", (1, 2), {}, ()),
        ("new", (3, 4), {}, ()),
        ("call", 0, "__add__", (None,), {}, ((0, 1),)),
        ("new", (4, 6), {}, ()),
        ("call", 2, "__eq__", (None,), {}, ((0, 3),)),
        ("call", 0, "__add__", (None,), {}, ((0, 1),)),
        ("get", 5, "norm1"),
    )
    outcomes = eval(programs["test_add"]["result"])
    view = ("instance", "Vec", {"norm1": 10, "x": 4, "y": 6})  # the attributes the tests read, not `_x` or `_history`
    assert outcomes[2] == ("returned", view) and outcomes[4] == ("returned", True) and outcomes[6] == ("returned", 10)
    scale = eval(programs["test_scale_and_read"]["steps"])
    assert scale[0] == ("call", -1, "origin", (), {}, ())  # a class method is called on the class
    assert eval(programs["test_scale_and_read"]["result"])[-1] == ("returned",)  # an iterator: nothing describes it
    assert eval(programs["test_bad"]["result"]) == (("raised", "ValueError"),)


def test_a_step_the_program_cannot_spell_ends_it_with_the_state_as_it_stood(tmp_path):
    programs, _ = _programs(tmp_path)
    unspellable = programs["test_unspellable_ends_the_program"]
    assert [step[0] for step in eval(unspellable["steps"])] == ["new", "get"]  # not `apply(lambda)`, nor `scale`
    assert eval(unspellable["state"]) == ((0, ("instance", "Vec", {"norm1": 6, "x": 5, "y": 1})),)


def test_programs_replay_in_a_fresh_interpreter_to_the_same_outcomes(tmp_path):
    _, raw = _programs(tmp_path)
    calls = [call for item in raw if (call := parsed_call(item, FUNCTIONS))]
    assert len(calls) == 4
    assert [c.check.test for c in reproduced(LocalSandbox(tmp_path), calls)] == [c.check.test for c in calls]


def test_perturbed_programs_change_one_literal_argument_or_repeat_a_call_and_keep_references(tmp_path):
    _, raw = _programs(tmp_path)
    calls = [call for item in raw if (call := parsed_call(item, FUNCTIONS))]
    scale = next(call for call in calls if call.check.test.endswith("test_scale_and_read"))
    probes = perturbed_calls([scale], recorded_arguments(raw), random.Random(0), limit=20)
    original = eval(scale.check.steps)
    assert len(probes) == 20 and all(probe.reads == READS and probe.args == "()" for probe in probes)
    changed = [eval(probe.steps) for probe in probes if len(eval(probe.steps)) == len(original)]
    for steps in changed:
        moved = [index for index, (a, b) in enumerate(zip(steps, original, strict=True)) if a != b]
        step, was = steps[moved[0]], original[moved[0]]
        assert len(moved) == 1 and step[0] == was[0] and (step[0] == "new" or step[1:3] == was[1:3])  # same call
    repeated = [eval(probe.steps) for probe in probes if len(eval(probe.steps)) == len(original) + 1]
    assert repeated and len(changed) + len(repeated) == 20
    # `v.scale(3)` (step 1) made twice: the steps after it on `w` (made at step 2) now name step 3 and on.
    twice = next(steps for steps in repeated if steps[2][:3] == ("call", 0, "scale"))
    assert twice[:2] == original[:2] and twice[3] == original[2]
    assert twice[4:] == tuple((s[0], s[1] + 1, *s[2:]) for s in original[3:])
    outcomes = call_outcomes(LocalSandbox(tmp_path), probes, "1", 1.0, 15.0)
    assert sum(found is not None for found in outcomes) == 20
    assert {"ValueError", "TypeError"} >= set().union(*(raised_in(found) for found in outcomes if found))
    add = next(call for call in calls if call.check.test.endswith("test_add"))
    refs = [eval(p.steps) for p in perturbed_calls([add], recorded_arguments(raw), random.Random(0), limit=40)]
    assert all(step[-1] == ((0, 1),) for steps in refs for step in steps if step[:3] == ("call", 0, "__add__"))


def _program(steps, result, state="()", reads=("x", "y")):
    return IoCheck(module="geo.vec", qualname="Vec", args="()", steps=steps, result=result, state=state, reads=reads)


def test_malformed_programs_and_programs_a_stand_in_passes_are_dropped():
    good = {"module": "geo.vec", "qualname": "Vec", "args": "()", "state": "()", "test": "t"}
    step = "(('new', (1, 2), {}, ()),)"
    assert parsed_call({**good, "steps": step, "result": "(('returned', None),)"}, FUNCTIONS) is not None
    bad = [
        {"steps": "(('call', 1, 'x', (), {}, ()),)", "result": "(('returned', 1),)"},  # a target not made yet
        {"steps": "(('new', (None,), {}, ((0, 0),)),)", "result": "(('returned', None),)"},  # a ref to itself
        {"steps": step, "result": "(('raised', 'NotImplementedError'),)"},  # the stand-in raises that too
        {"steps": step, "result": "()"},  # an outcome short
        {"steps": "(('exec', 'x'),)", "result": "(('returned', 1),)"},
        {"steps": step, "result": "(('returned', None),)", "reads": ["x y"]},
    ]
    for change in bad:
        assert parsed_call({**good, **change}, FUNCTIONS) is None, change
    assert parsed_call({**good, "steps": step, "result": "(('returned', None),)"}, {"geo.vec": ["Vec.x"]}) is None


def _importable(tmp_path, monkeypatch, source):
    """`geo.vec` holding `source`, importable here for as long as the test runs, whatever an earlier test imported."""
    importable_module(tmp_path, monkeypatch, "geo.vec", source)


HONEST = """
class Vec:
    def __init__(self, x, y):
        if type(x) is not int:
            raise ValueError(x)
        self.coords = [x, y]  # another layout

    x = property(lambda self: self.coords[0])
    y = property(lambda self: self.coords[1])
"""


def test_an_honest_layout_passes_and_a_wrong_value_or_a_missing_attribute_fails(tmp_path, monkeypatch):
    _importable(tmp_path, monkeypatch, HONEST)
    steps = "(('new', (1, 2), {}, ()), ('get', 0, 'x'), ('new', ('a', 1), {}, ()))"
    record = replay_program("geo.vec", "Vec", steps, ["x", "y"], 5.0)
    expected = "(('returned', None), ('returned', 1), ('raised', 'ValueError'))"
    state = "((0, ('instance', 'Vec', {'x': 1, 'y': 2})),)"
    assert judge(_program(steps, expected, state), record).outcome == "passed"
    assert judge(_program(steps, expected.replace("1)", "7)", 1), state), record).outcome == "failed"
    assert judge(_program(steps, expected, state.replace("2}", "2, 'z': 0}")), record).outcome == "failed"
    wildcard = "(('returned', None), ('returned',), ('raised', 'ValueError'))"
    assert judge(_program(steps, wildcard, state), record).outcome == "passed"
    assert judge(_program(steps, expected, state), {"raised": "ImportError"}).outcome == "failed"


PROTOCOL_ONLY = """
class Vec:
    def __init__(self, x, y):
        self.coords = [x, y]

    def __len__(self):  # `bool()` comes from here: no `__bool__`
        return 2

    def __iter__(self):  # and `in` from here: no `__contains__`
        return iter(self.coords)
"""


def test_dunder_steps_replay_through_their_operator_so_a_rewrite_may_derive_them(tmp_path, monkeypatch):
    _importable(tmp_path, monkeypatch, PROTOCOL_ONLY)
    steps = "(('new', (1, 2), {}, ()), ('call', 0, '__bool__', (), {}, ()), ('call', 0, '__contains__', (2,), {}, ()))"
    expected = "(('returned', None), ('returned', True), ('returned', True))"
    record = replay_program("geo.vec", "Vec", steps, [], 5.0)
    assert judge(_program(steps, expected, "((0, ('instance', 'Vec', {})),)", reads=()), record).outcome == "passed"
