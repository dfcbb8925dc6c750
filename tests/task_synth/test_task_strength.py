"""Task strength by mutants, without an engine: the mutants of a unit, and the unseen checks chosen to kill them."""

from __future__ import annotations

import ast
import random

import pytest

from task_synth.validation import mutants
from task_synth.validation.mutants import _parsed, _ReplaceOne, _Sites, mutants_of
from task_synth.validation.task_strength import measured_strength, strongest
from tests.task_fixture import ORIGINAL_OPS

STACK = '''"""Stacks."""


class Stack:
    def __init__(self, capacity):
        self.capacity = capacity
        self.items = []

    def push(self, item):
        """Push unless full."""
        if len(self.items) >= self.capacity:
            raise OverflowError("full")
        self.items.append(item)
        return len(self.items)

    def pop(self):
        return self.items.pop() - 1
'''


def changed_lines(before: str, after: str) -> list[str]:
    return [line.strip() for line in after.splitlines() if line not in before.splitlines()]


def test_each_mutant_changes_one_thing_inside_the_unit_and_still_parses():
    mutants = mutants_of(ORIGINAL_OPS, "clamp", random.Random(0))
    changes = {(m.kind, tuple(changed_lines(ORIGINAL_OPS, m.source))) for m in mutants}
    assert ("comparison", ("if low >= high:",)) in changes
    assert ("builtin", ("return min(low, min(value, high))",)) in changes
    assert ("dropped statement", ("pass",)) in changes
    for mutant in mutants:
        ast.parse(mutant.source)
        assert mutant.source.split("def clamp")[0] == ORIGINAL_OPS.split("def clamp")[0]  # add, sub, mul untouched


def test_a_methods_mutants_stay_in_the_method_and_leave_its_docstring():
    mutants = mutants_of(STACK, "Stack.push", random.Random(0))
    assert mutants and all(10 <= m.line <= 14 for m in mutants)
    assert all('"""Push unless full."""' in m.source and "self.items.pop() - 1" in m.source for m in mutants)
    assert {m.kind for m in mutants} >= {"comparison", "dropped statement"}


def test_a_whole_classs_mutants_swap_its_first_and_last_element():
    peek = "\n    def peek(self):\n        return self.items[-1]\n"
    source = STACK + peek + "\n    def bottom(self):\n        return self.items[0]\n"
    mutants = mutants_of(source, "Stack", random.Random(0))
    swapped = [m.source for m in mutants if m.kind == "boundary"]
    assert len(swapped) == 2 and {text.count("self.items[0]") for text in swapped} == {0, 2}
    assert ("return self.items.pop() + 1",) in {tuple(changed_lines(source, m.source)) for m in mutants}


AWKWARD = (
    "# \u00e9t\u00e9 \x0c form feed\r\n"
    "class Box:\r\n"
    "\tdef check(self, items, limit):\r\n"
    "\t\tlabel = 'caf\u00e9' + str(len(items))  # trailing comment\r\n"
    "\t\t@staticmethod\r\n"
    "\t\tdef inner(x):\r\n"
    "\t\t\treturn x\r\n"
    "\t\tok = (\r\n"
    "\t\t\tlimit is not None\r\n"
    "\t\t\tand len(items) <= (0)\r\n"
    "\t\t\tor not(items)\r\n"
    "\t\t)\r\n"
    "\t\tif ok and items[0] in label:\r\n"
    "\t\t\tlimit += 1\r\n"
    "\t\t\treturn max(limit, items[-1])\r\n"
    "\t\treturn label\r\n"
)


def test_each_mutant_is_the_module_a_whole_transform_of_its_site_gives(monkeypatch):
    """Mutants are spliced into the source text; the splice must give what transforming and printing the whole module
    gives (CRLF, tabs, non-ASCII text, multi-line expressions, parentheses, a decorated nested function), and only the
    sites a splice cannot print (the multi-line `and`/`or`) may fall back to that slow transform."""
    parsed = _parsed(AWKWARD)
    assert parsed is not None
    wrapper = parsed[0]
    sites = _Sites("Box.check")
    wrapper.visit(sites)
    transforms: list[str] = []

    class CountedReplace(_ReplaceOne):
        def __init__(self, site):
            super().__init__(site)
            transforms.append(site.kind)

    monkeypatch.setattr(mutants, "_ReplaceOne", CountedReplace)
    made = mutants_of(AWKWARD, "Box.check", random.Random(0), limit=100)
    monkeypatch.undo()
    assert transforms.count("boolean") <= 2 and len(transforms) <= 3
    assert len(made) == len(sites.sites) >= 20
    kinds = {mutant.kind for mutant in made}
    assert kinds >= {"dropped statement", "comparison", "boolean", "negation", "constant", "builtin", "operator"}
    for site, mutant in zip(sorted(sites.sites, key=lambda s: s.line), made, strict=True):
        transformed = wrapper.module.visit(_ReplaceOne(site)).code
        assert mutant.source == transformed or ast.dump(ast.parse(mutant.source)) == ast.dump(ast.parse(transformed))
        assert mutant.source.split("class Box")[0] == AWKWARD.split("class Box")[0]


def test_there_are_no_mutants_of_what_is_not_there_or_does_not_parse():
    assert mutants_of(STACK, "Stack.peek", random.Random(0)) == []
    assert mutants_of("def broken(:\n", "broken", random.Random(0)) == []


def test_many_sites_are_sampled_down_to_the_limit_the_same_way_each_time():
    source = "def f(x):\n" + "".join(f"    x = x + {n}\n" for n in range(40)) + "    return x\n"
    first = mutants_of(source, "f", random.Random("seed"), limit=10)
    assert len(first) == 10 and first == mutants_of(source, "f", random.Random("seed"), limit=10)


def test_unseen_calls_are_chosen_to_kill_the_mutants_the_visible_ones_leave_alive():
    kills = [{"v1"}, {"u2"}, {"u2", "u3"}, {"u3"}, {"u4"}, set()]
    assert strongest(["u1", "u2", "u3", "u4"], ["v1"], kills, limit=2) == ["u2", "u3"]
    assert strongest(["u1", "u2", "u3", "u4"], ["v1"], kills, limit=4) == ["u2", "u3", "u4", "u1"]
    assert strongest(["u1", "u2"], [], None, limit=1) == ["u1"]  # no mutants: the ranking alone


def test_the_kill_rate_leaves_out_mutants_no_call_tells_apart():
    strength = measured_strength([{"a"}, {"b"}, set(), {"a", "c"}], ["a"], 1.5)
    assert strength is not None
    assert (strength.mutants, strength.equivalent, strength.killed) == (4, 1, 2)
    assert strength.kill_rate == pytest.approx(2 / 3)
    assert measured_strength([set()], ["a"], 0.1).kill_rate is None  # type: ignore[union-attr]
    assert measured_strength(None, ["a"], 0.0) is None


def test_a_functions_last_return_none_is_not_dropped_for_it_changes_nothing():
    """toolz's `_num_required_args` without its final `return None` earned 1.0 twice in `regrow bench mutants`: it
    returns None anyway. A `return None` earlier in the body still may be dropped."""
    source = "def f(x):\n    if x:\n        return None\n    x += 1\n    return None\n"
    dropped = [changed_lines(source, m.source) for m in mutants_of(source, "f", random.Random(0))]
    assert dropped.count(["pass"]) == 2  # `if x:` and `x += 1`; the final return stays
    assert all(m.source.rstrip().endswith("return None") for m in mutants_of(source, "f", random.Random(0)))
