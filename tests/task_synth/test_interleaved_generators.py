"""Two generators of one receiver drawn in turn: the evidence for a cursor that another consumer of the same object
moves while it is suspended, which no call alone shows (no Docker)."""

import random

from env_server.grading.checks import judge
from task_synth.validation.call_runs import call_outcomes
from task_synth.validation.recorded_calls import parsed_call
from task_synth.validation.unseen_calls import perturbed_calls, recorded_arguments
from tests.task_synth.recorder_runs import LocalSandbox, recorded_raw_calls

FUNCTIONS = {"gen.shelf": ["Shelf.take"]}
SHELF = '''
from collections import defaultdict, deque


class Shelf:
    """Sorts a stream's items by key as each key is asked for, holding the others back."""

    def __init__(self, items, key):
        self._source = iter(items)
        self._key = key
        self._held = defaultdict(deque)

    def take(self, wanted):
        while True:
            if self._held[wanted]:
                yield self._held[wanted].popleft()
                continue
            for item in self._source:
                found = self._key(item)
                if found == wanted:
                    yield item
                    break
                else:
                    self._held[found].append(item)
            else:
                return
'''
# The one-token mutant: past a match it goes on reading the source, and misses what another consumer held back.
MUTANT = SHELF.replace("                    break\n", "")
FILES = {
    "gen/__init__.py": "",
    "gen/shelf.py": SHELF,
    "tests/test_shelf.py": """
from gen.shelf import Shelf


def test_take_one_key_then_another():
    shelf = Shelf(["a", "bb", "cc", "d", "eee", "ff", "g"], len)
    assert list(shelf.take(1)) == ["a", "d", "g"]
    assert list(shelf.take(2)) == ["bb", "cc", "ff"]
""",
}


def _outcomes(tmp_path, checks):
    return [call.outcome if call else None for call in call_outcomes(LocalSandbox(tmp_path), checks, "1", 2.0, 30.0)]


def test_a_generator_methods_second_call_drawn_in_turn_tells_a_one_token_mutant_that_no_single_call_does(tmp_path):
    raw = recorded_raw_calls(tmp_path, FILES, FUNCTIONS)
    calls = [call for item in raw if (call := parsed_call(item, FUNCTIONS))]
    assert len(calls) == 2
    probes = perturbed_calls(calls, recorded_arguments(raw), random.Random(0), limit=24)
    beside = [probe for probe in probes if probe.beside is not None]
    single = [call.check for call in calls] + [probe for probe in probes if probe.beside is None]
    assert beside and single

    original = _outcomes(tmp_path, beside + single)
    assert all(original[: len(beside)])  # each pair drew to its ends, every item described
    (tmp_path / "gen" / "shelf.py").write_text(MUTANT)
    mutated = _outcomes(tmp_path, beside + single)

    assert mutated[len(beside) :] == original[len(beside) :]  # alone, each call reads alike
    assert mutated[: len(beside)] != original[: len(beside)]
    assert "tuple['generated', tuple['bb', 'ff'], 'ended']" in str(mutated[: len(beside)])  # cc was lost


def test_a_pair_of_draws_is_judged_part_by_part_and_a_subclass_of_the_ending_class_agrees():
    check = parsed_call(
        {
            "module": "gen.shelf", "qualname": "Shelf.take", "args": "(1,)", "kwargs": "{}", "inputs": "eA==",
            "state": "{}", "take": 16, "beside": "((2,), {})",
            "result": "(('generated', ('a', ), 'ended'), ('generated', (), ('raised', 'LookupError')))",
        },
        FUNCTIONS,
    )  # fmt: skip
    assert check is not None
    record = {
        "returned": "(('generated', ('a', ), 'ended'), ('generated', (), ('raised', 'KeyError')))",
        "bases_of": {"KeyError": ["LookupError", "Exception", "BaseException", "object"]},
        "state": "{}",
    }
    assert judge(check.check, record).outcome == "passed"
    swapped = {**record, "returned": "(('generated', (), ('raised', 'KeyError')), ('generated', ('a', ), 'ended'))"}
    assert judge(check.check, swapped).outcome == "failed"
    single = {**record, "returned": "('generated', ('a', ), 'ended')"}
    assert judge(check.check, single).outcome == "failed"


def test_a_second_call_whose_draws_do_not_pair_up_is_dropped():
    base = {
        "module": "gen.shelf", "qualname": "Shelf.take", "args": "(1,)", "kwargs": "{}", "inputs": "eA==",
        "state": "{}", "take": 16,
    }  # fmt: skip
    one = "('generated', ('a', ), 'ended')"
    assert parsed_call({**base, "beside": "((2,), {})", "result": one}, FUNCTIONS) is None
    assert parsed_call({**base, "beside": "(2,)", "result": f"({one}, {one})"}, FUNCTIONS) is None
    assert parsed_call({**base, "beside": "((2,), {})", "result": f"({one}, {one})"}, FUNCTIONS) is not None
