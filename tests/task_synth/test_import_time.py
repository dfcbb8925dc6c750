"""Units whose body runs while the package is imported break the import when deleted (six builds its move tables
at import time); they are tried after every other unit, so that a small budget is not spent on them."""

from types import SimpleNamespace

from task_synth.candidates.units import module_units
from task_synth.pipeline import ordered_candidates
from task_synth.validation.baseline import Baseline
from task_synth.validation.suite_runs import IMPORT_TIME

SOURCE = """\
class Moved:
    def __init__(self, name):
        self.name = name
        self.loaded = False
        self.calls = 0

    def load(self):
        self.loaded = True
        self.calls += 1
        return self.name


class Plain:
    def shout(self, text):
        loud = text.upper()
        loud = loud.strip()
        return loud + "!"


def _table():
    names = ["a", "b"]
    names.sort()
    return {name: Moved(name) for name in names}


def lookup(name):
    table = TABLE
    found = table[name]
    return found.load()


TABLE = _table()
"""


def _baseline(units) -> Baseline:
    """Every body line covered by one test, and what ran at import (the table, and Moved.__init__) by IMPORT_TIME."""
    lines: dict[int, set[str]] = {}
    for unit in units:
        for start, end in unit.body_lines:
            for line in range(start, end + 1):
                lines[line] = {"tests/test_m.py::test_all"}
    for line in (*range(3, 6), *range(21, 24)):  # Moved.__init__'s and _table's bodies
        lines.setdefault(line, set()).add(IMPORT_TIME)
    return Baseline({"tests/test_m.py::test_all"}, {"tests/test_m.py::test_all"}, {"m.py": lines}, ["m"], {})


def test_what_runs_at_import_is_told_apart_from_what_runs_in_tests():
    units = {unit.qualname + ":" + unit.kind: unit for unit in module_units("m.py", SOURCE, "")}
    baseline = _baseline(units.values())
    at_import = {key for key, unit in units.items() if baseline.runs_at_import(unit)}
    # A class counts by its methods' bodies, not by the def lines that run whenever a class is defined.
    assert at_import == {"Moved:class", "Moved.__init__:method", "_table:function"}
    assert not baseline.runs_at_import(units["Plain:class"])


def test_units_that_run_at_import_come_last_whatever_their_weight():
    units = module_units("m.py", SOURCE, "")
    context = SimpleNamespace(baseline=_baseline(units))
    ordered = ordered_candidates(context, units, ["stub", "remove"], seed=7, budget=len(units) * 2)
    names = [unit.qualname for unit, _ in ordered]
    late = {"Moved", "Moved.__init__", "_table"}
    first_late = min(index for index, name in enumerate(names) if name in late)
    assert all(name in late for name in names[first_late:]), names
    assert set(names) >= late  # tried, after the others, when the budget allows


def test_each_mode_takes_a_unit_no_other_mode_took_while_there_are_any():
    units = module_units("m.py", SOURCE, "")
    context = SimpleNamespace(baseline=_baseline(units))
    early = [u for u in units if not context.baseline.runs_at_import(u) and u.kind in ("function", "method", "class")]
    ordered = ordered_candidates(context, units, ["stub", "remove"], seed=7, budget=len(early))
    assert len(early) >= 2 and {mode for _, mode in ordered} == {"stub", "remove"}
    assert len({unit.key for unit, _ in ordered}) == len(ordered)  # a stub and a removal of one unit repeat each other
