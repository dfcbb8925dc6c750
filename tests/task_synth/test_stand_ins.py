"""Trivial stand-ins for a deleted unit: what each one writes, that it parses and keeps the unit's signature (no
Docker)."""

import ast
import textwrap
from pathlib import Path

import pytest

from task_synth.candidates.deletion import Deletion, delete_unit
from task_synth.candidates.units import Unit, enumerate_units
from task_synth.repository.repo_layout import read_layout
from task_synth.validation.stand_ins import stand_ins

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
TOOLS = textwrap.dedent(
    '''
    class Tool(Base, metaclass=Meta):
        """A tool."""

        def __init__(self, name):
            self.name = name

        def run(self, command, *rest):
            """Run `command`."""
            return command.upper()

        @staticmethod
        def parse(text):
            return text.split()

        @classmethod
        def make(cls, name):
            return cls(name)

        @property
        def label(self):
            return self.name.title()


    def combine(left, right=None, *, sep=","):
        return f"{left}{sep}{right}"


    def now():
        return 1
    '''
)


@pytest.fixture(scope="module")
def units():
    return {(unit.kind, unit.qualname): unit for unit in enumerate_units(read_layout(MINILIB))}


def _tools_deletion(qualname: str, kind: str) -> Deletion:
    unit = Unit("pkg/tools.py", qualname, kind, 1, 1, ((1, 1),), 3, 1)
    return Deletion(unit, "stub", {"pkg/tools.py": "# stubbed\n"}, {"pkg/tools.py": TOOLS})


def _definition(source: str, qualname: str) -> ast.FunctionDef | ast.ClassDef:
    scope: list[ast.stmt] = ast.parse(source).body
    for part in qualname.split("."):
        node = next(n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
        scope = node.body
    return node


def _by_name(deletion: Deletion) -> dict[str, str]:
    return {stand_in.name: stand_in.changed[deletion.unit.path] for stand_in in stand_ins(deletion)}


def _returned(function: ast.FunctionDef) -> str:
    return ast.unparse(function.body[-1])


def test_a_function_gets_none_its_first_argument_and_an_always_equal_object():
    texts = _by_name(_tools_deletion("combine", "function"))
    assert list(texts) == ["return an always-equal object", "return None", "return the first argument"]
    assert [_returned(_definition(text, "combine")) for text in texts.values()] == [
        "return _AlwaysEqual()",
        "return None",
        "return left",
    ]


def test_every_stand_in_parses_and_keeps_the_signature_decorators_and_docstring():
    for qualname, kind in [
        ("combine", "function"),
        ("Tool.run", "method"),
        ("Tool.parse", "method"),
        ("Tool.label", "method"),
    ]:
        original = _definition(TOOLS, qualname)
        for name, text in _by_name(_tools_deletion(qualname, kind)).items():
            compile(text, "tools.py", "exec")
            replaced = _definition(text, qualname)
            assert ast.dump(replaced.args) == ast.dump(original.args), (qualname, name)
            assert [ast.dump(d) for d in replaced.decorator_list] == [ast.dump(d) for d in original.decorator_list]
            assert ast.get_docstring(replaced) == ast.get_docstring(original)
            assert text.replace(ast.get_source_segment(text, replaced), "") == TOOLS.replace(
                ast.get_source_segment(TOOLS, original), ""
            )


def test_a_method_returns_its_first_argument_after_self_or_cls_but_a_static_method_its_very_first():
    returned = {
        qualname: _returned(
            _definition(_by_name(_tools_deletion(qualname, "method"))["return the first argument"], qualname)
        )
        for qualname in ("Tool.run", "Tool.parse", "Tool.make")
    }
    assert returned == {"Tool.run": "return command", "Tool.parse": "return text", "Tool.make": "return name"}


def test_without_an_argument_to_return_that_stand_in_is_skipped():
    assert "return the first argument" not in _by_name(_tools_deletion("now", "function"))
    assert "return the first argument" not in _by_name(_tools_deletion("Tool.label", "method"))


def test_init_only_returns_none():
    assert list(_by_name(_tools_deletion("Tool.__init__", "method"))) == ["return None"]


def test_a_class_becomes_an_empty_class_of_its_name_without_bases():
    texts = _by_name(_tools_deletion("Tool", "class"))
    assert list(texts) == ["class Tool: pass"]
    klass = _definition(texts["class Tool: pass"], "Tool")
    assert ast.unparse(klass) == "class Tool:\n    pass"
    assert _definition(texts["class Tool: pass"], "combine")


def test_the_always_equal_object_equals_everything_and_is_truthy_empty_and_itself_all_the_way_down():
    namespace: dict = {"Base": object, "Meta": type}
    exec(_by_name(_tools_deletion("combine", "function"))["return an always-equal object"], namespace)
    answer = namespace["combine"](1, 2)
    assert answer == 42 and answer == "text" and answer == pytest.approx(1.25) and not (answer != None)  # noqa: E711
    assert bool(answer) and hash(answer) == 0 and list(answer) == [] and len(answer) == 0
    assert answer.anything is answer and answer(1, key=2) is answer and answer.strip().lower() == "a"


def test_a_removed_unit_is_written_back_with_the_files_the_removal_fixed(units):
    layout = read_layout(MINILIB)
    deletion = delete_unit(layout, units["function", "gcd"], "remove")
    assert set(deletion.changed) == {"src/minilib/mathops.py", "src/minilib/__init__.py"}
    for stand_in in stand_ins(deletion):
        assert set(stand_in.changed) == set(deletion.changed)
        assert stand_in.changed["src/minilib/__init__.py"] == deletion.original["src/minilib/__init__.py"]
        namespace: dict = {}
        exec(stand_in.changed["src/minilib/mathops.py"], namespace)
        assert callable(namespace["gcd"]) and callable(namespace["lcm"]), stand_in.name


def test_a_feature_stand_in_replaces_the_public_function_only(units):
    deletion = delete_unit(read_layout(MINILIB), units["feature", "variance"], "stub")
    namespace: dict = {}
    exec(_by_name(deletion)["return the first argument"], namespace)
    assert namespace["variance"]([1, 2]) == [1, 2]


def test_a_deleted_module_gets_no_stand_ins(units):
    assert stand_ins(delete_unit(read_layout(MINILIB), units["module", "minilib.mathops"], "file")) == []
