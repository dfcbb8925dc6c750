"""A deleted generator function's calls: the items each test drew, replayed and judged anew (no Docker)."""

import random

import pytest

from env_server.grading.checks import judge
from proto.call_replay import replay
from task_synth.validation.call_runs import call_outcomes, reproduced
from task_synth.validation.recorded_calls import parsed_call
from task_synth.validation.unseen_calls import perturbed_calls, recorded_arguments
from tests.task_synth.recorder_runs import LocalSandbox, importable_module, recorded_raw_calls

FUNCTIONS = {"gen.core": ["countdown", "naturals"]}
ORIGINAL = """
def countdown(n):
    if n < 0:
        raise ValueError(n)
    while n > 0:
        yield n
        n -= 1


def naturals(start):
    while True:
        yield [start]
        start += 1
"""
FILES = {
    "gen/__init__.py": "",
    "gen/core.py": ORIGINAL,
    "tests/test_gen.py": """
import itertools

import pytest

from gen.core import countdown, naturals


def test_countdown():
    assert list(countdown(3)) == [3, 2, 1]


def test_negative():
    with pytest.raises(ValueError):
        list(countdown(-1))


def test_naturals():
    assert list(itertools.islice(naturals(5), 3)) == [[5], [6], [7]]
""",
}


def _replayed(check):
    """The call `check` replays, with no keyword arguments, receiver or recipes."""
    return {"module": check.module, "qualname": check.qualname, "args": check.args, "kwargs": "{}", "take": check.take}


def test_a_generators_calls_keep_the_items_drawn_and_how_it_ended_and_replay_alike(tmp_path):
    """Drawn to the end: the items and 'ended' (the replay draws one more, to see it); stopped early: the items the
    test drew and no end; raising while drawn: the exception class."""
    raw = recorded_raw_calls(tmp_path, FILES, FUNCTIONS)
    calls = [call for item in raw if (call := parsed_call(item, FUNCTIONS))]
    assert sorted((c.check.qualname, c.check.args, c.check.result, c.check.take) for c in calls) == [
        ("countdown", "(-1,)", "('generated', (), ('raised', 'ValueError'))", 1),
        ("countdown", "(3,)", "('generated', (3, 2, 1, ), 'ended')", 4),
        ("naturals", "(5,)", "('generated', ([5], [6], [7], ), None)", 3),
    ]
    assert [c.check.args for c in reproduced(LocalSandbox(tmp_path), calls)] == [c.check.args for c in calls]
    probes = perturbed_calls(calls, recorded_arguments(raw), random.Random(0), limit=6)
    assert probes and all(probe.take in (1, 3, 4) for probe in probes)
    found = call_outcomes(LocalSandbox(tmp_path), probes, "1", 1.0, 15.0)
    assert all(call is not None and call.check.result.startswith("('generated'") for call in found), [
        (p.args, p.qualname, f) for p, f in zip(probes, found, strict=True)
    ]


@pytest.mark.parametrize(
    ("name", "source", "outcome"),
    [
        ("original", ORIGINAL, "passed"),
        ("a list, raising at once", "def countdown(n):\n    if n < 0:\n        raise ValueError(n)\n"
         "    return list(range(n, 0, -1))\n", "passed"),
        ("one item short", "def countdown(n):\n    yield from range(n, 1, -1)\n", "failed"),
        ("a lazy ValueError turned TypeError", "def countdown(n):\n    raise TypeError(n)\n    yield\n", "failed"),
    ],
)  # fmt: skip
def test_an_honest_rewrite_passes_however_it_makes_its_items_and_a_wrong_one_fails(
    tmp_path, monkeypatch, name, source, outcome
):
    importable_module(tmp_path, monkeypatch, "gen.core", source)
    checks = [
        parsed_call(
            {"module": "gen.core", "qualname": "countdown", "args": args, "result": result, "take": take, "test": "t"},
            FUNCTIONS,
        ).check
        for args, result, take in [
            ("(3,)", "('generated', (3, 2, 1, ), 'ended')", 4),
            ("(-1,)", "('generated', (), ('raised', 'ValueError'))", 1),
        ]
    ]
    verdicts = [judge(check, replay(_replayed(check), 5.0)) for check in checks]
    assert ("failed" if any(v.outcome == "failed" for v in verdicts) else "passed") == outcome, (name, verdicts)


def test_a_generators_call_whose_draws_do_not_add_up_is_dropped():
    base = {"module": "gen.core", "qualname": "countdown", "args": "(3,)", "test": "t"}
    assert parsed_call({**base, "result": "('generated', (3, 2), None)", "take": 2}, FUNCTIONS) is not None
    for result, take in [
        ("('generated', (3, 2), None)", 3),  # stopped early, but fewer items than drawn
        ("('generated', (3, 2, 1), 'ended')", 3),  # ended after the draws ran out
        ("('generated', (), ('raised', 'NotImplementedError'))", 1),  # what the stub raises too
        ("[3, 2, 1]", 4),
        ("('generated', (3,), 'stopped')", 4),
    ]:
        assert parsed_call({**base, "result": result, "take": take}, FUNCTIONS) is None, result


METHOD_FILES = {
    "gen/__init__.py": "",
    "gen/bag.py": """
class Bag:
    def __init__(self, items):
        self.items = list(items)
        self.drawn = 0

    def larger(self, than):
        for item in self.items:
            self.drawn += 1
            if item > than:
                yield item
""",
    "tests/test_bag.py": """
from gen.bag import Bag


def test_larger():
    bag = Bag([3, 1, 4, 1, 5])
    assert list(bag.larger(2)) == [3, 4, 5]
    assert bag.drawn == 5
""",
}


def test_a_generator_methods_calls_keep_the_receiver_and_its_state_after_the_draws_and_replay_alike(tmp_path):
    functions = {"gen.bag": ["Bag.larger"]}
    raw = recorded_raw_calls(tmp_path, METHOD_FILES, functions)
    calls = [call for item in raw if (call := parsed_call(item, functions))]
    assert [(c.check.args, c.check.result, c.check.take) for c in calls] == [
        ("(2,)", "('generated', (3, 4, 5, ), 'ended')", 4)
    ]
    assert calls[0].check.inputs and calls[0].check.state == "{'drawn': 5, 'items': [3, 1, 4, 1, 5]}"
    assert len(reproduced(LocalSandbox(tmp_path), calls)) == 1
    probes = perturbed_calls(calls, recorded_arguments(raw), random.Random(0), limit=4)
    found = call_outcomes(LocalSandbox(tmp_path), probes, "1", 1.0, 15.0)
    assert {call.check.result for call in found if call} >= {"('generated', (4, 5, ), 'ended')"}


LAZY_FILES = {
    "gen/__init__.py": "",
    "gen/lazy.py": """
from functools import partial
from itertools import islice


def take(n, iterable):
    return list(islice(iterable, n))


def chunked(iterable, n):
    return iter(partial(take, n, iter(iterable)), [])


def doubled(values):
    return map(lambda value: value * 2, values)
""",
    "tests/test_lazy.py": """
from gen.lazy import chunked, doubled


def test_chunked():
    assert list(chunked([1, 2, 3, 4, 5], 2)) == [[1, 2], [3, 4], [5]]


def test_doubled():
    first = doubled([1, 2, 3])
    assert next(first) == 2
""",
}


def test_a_function_that_returns_a_lazy_iterator_is_recorded_as_it_is_drawn_and_a_generator_rewrite_agrees(
    tmp_path, monkeypatch
):
    """more-itertools' chunked returns `iter(callable, sentinel)`, others a map or a zip: no description stands for
    those, so they made no check; the test draws them, and what it drew is the outcome, as for a generator."""
    functions = {"gen.lazy": ["chunked", "doubled"]}
    raw = recorded_raw_calls(tmp_path, LAZY_FILES, functions)
    calls = [call for item in raw if (call := parsed_call(item, functions))]
    assert sorted((c.check.qualname, c.check.args, c.check.result, c.check.take) for c in calls) == [
        ("chunked", "([1, 2, 3, 4, 5], 2)", "('generated', ([1, 2], [3, 4], [5], ), 'ended')", 4),
        ("doubled", "([1, 2, 3],)", "('generated', (2, ), None)", 1),
    ]
    assert len(reproduced(LocalSandbox(tmp_path), calls)) == 2
    rewrite = (
        "def chunked(iterable, n):\n    items = list(iterable)\n"
        "    for at in range(0, len(items), n):\n        yield items[at : at + n]\n"
    )
    importable_module(tmp_path / "rewrite", monkeypatch, "gen.lazy", rewrite)
    check = next(c.check for c in calls if c.check.qualname == "chunked")
    assert judge(check, replay(_replayed(check), 5.0)).outcome == "passed"
