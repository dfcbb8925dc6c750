"""Removing a method takes the class-body lines that alias it along, so the package still imports."""

from pathlib import Path

from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.repository.repo_layout import read_layout

MONEY = """class Money:
    def __init__(self, cents):
        self.cents = cents

    def add(self, other):
        if not isinstance(other, Money):
            return NotImplemented
        cents = self.cents + other.cents
        return Money(cents)

    __add__ = add
    __radd__ = __iadd__ = __add__
    total: "Money" = __radd__

    def __repr__(self):
        return f"Money({self.cents})"
"""


def test_a_removed_method_takes_its_class_body_aliases_along(tmp_path: Path):
    """Before, `__add__ = add` stayed behind the removed `add`: the class body raised NameError at import (isodate's
    `__radd__ = __add__`: 5 candidates import_broken)."""
    (tmp_path / "money").mkdir()
    (tmp_path / "money" / "__init__.py").write_text(MONEY)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_money.py").write_text(
        "from money import Money\n\ndef test_add():\n    Money(1).add(Money(2))\n"
    )
    layout = read_layout(tmp_path)
    unit = next(u for u in enumerate_units(layout) if (u.kind, u.qualname) == ("method", "Money.add"))
    text = delete_unit(layout, unit, "remove").changed["money/__init__.py"]
    namespace: dict = {}
    exec(compile(text, "money/__init__.py", "exec"), namespace)  # the class body runs as an import would run it
    money = namespace["Money"]
    assert not any(hasattr(money, name) for name in ("add", "__radd__", "__iadd__", "total"))
    assert (
        "Money.__repr__" in repr(money.__repr__) and money.__add__ is object.__add__
        if hasattr(object, "__add__")
        else True
    )
