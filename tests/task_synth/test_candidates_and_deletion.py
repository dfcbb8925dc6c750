"""Candidate enumeration and the three deletion modes, on the minilib fixture (pure Python, no Docker)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from task_synth.candidates.deletion import MODE_KINDS, DeletionError, delete_unit
from task_synth.candidates.units import enumerate_units, sample_units
from task_synth.repository.repo_layout import read_layout

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
MODULES = [
    "minilib",
    "minilib.containers",
    "minilib.mathops",
    "minilib.matrix",
    "minilib.parsing",
    "minilib.report",
    "minilib.shapes",
    "minilib.textops",
]


@pytest.fixture(scope="module")
def layout():
    return read_layout(MINILIB)


@pytest.fixture(scope="module")
def units(layout):
    return {(unit.kind, unit.qualname): unit for unit in enumerate_units(layout)}


def _apply(deletion, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(MINILIB / "src", copy / "src")
    for path, text in deletion.changed.items():
        if text is None:
            (copy / path).unlink()
        else:
            (copy / path).write_text(text)
    return copy


def _import_errors(copy: Path, modules: list[str]) -> str:
    return _import_errors_of_each([(copy, modules)])[0]


# One interpreter for many copies: each copy's modules are dropped before the next copy's are imported.
_IMPORT_EACH = """
import importlib, json, sys, traceback
errors = []
for root, names in json.loads(sys.argv[1]):
    for name in [name for name in sys.modules if name == "minilib" or name.startswith("minilib.")]:
        del sys.modules[name]
    sys.path.insert(0, root)
    importlib.invalidate_caches()
    try:
        for name in names:
            importlib.import_module(name)
        errors.append("")
    except Exception:
        errors.append(traceback.format_exc())
    sys.path.remove(root)
print(json.dumps(errors))
"""


def _import_errors_of_each(copies: list[tuple[Path, list[str]]]) -> list[str]:
    """The traceback of each copy's first failing import ("" where all import), in one interpreter."""
    argument = json.dumps([(str(copy / "src"), modules) for copy, modules in copies])
    result = subprocess.run([sys.executable, "-B", "-c", _IMPORT_EACH, argument], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_layout_separates_package_modules_from_tests(layout):
    assert layout.modules["src/minilib/textops.py"] == "minilib.textops"
    assert layout.modules["src/minilib/__init__.py"] == "minilib"
    assert "tests/test_textops.py" in layout.test_files
    assert not any(path.startswith("tests/") for path in layout.modules)


def test_enumeration_finds_every_kind(units):
    assert ("function", "wrap_words") in units
    assert ("method", "Matrix.determinant") in units
    assert ("class", "LRUCache") in units
    assert ("module", "minilib.parsing") in units


def test_feature_bundles_private_helpers_only_its_owner_uses(units):
    assert units[("feature", "slugify")].helpers == ("_collapse_separators", "_fold_accents")
    assert units[("feature", "parse_settings")].helpers == ("_coerce_scalar", "_split_pairs")


def test_trivial_units_are_skipped(units):
    assert ("method", "Rectangle.area") not in units  # one statement
    assert ("method", "BoundedStack.__len__") not in units


def test_units_carry_lines_size_and_complexity(units):
    unit = units[("function", "wrap_words")]
    assert (unit.start_line, unit.end_line) == (32, 47)
    assert unit.body_lines == ((34, 47),)  # after the docstring
    assert unit.statements == 10
    assert unit.complexity > 3


def test_sampling_is_deterministic_for_a_seed(units):
    weighted = [(unit, 1.0 + unit.statements) for unit in units.values()]
    first = sample_units(weighted, 5, seed=7)
    assert [u.key for u in first] == [u.key for u in sample_units(list(reversed(weighted)), 5, seed=7)]
    assert len({u.key for u in first}) == 5
    assert [u.key for u in first] != [u.key for u in sample_units(weighted, 5, seed=8)]


def test_stub_keeps_signature_and_docstring(layout, units, tmp_path):
    deletion = delete_unit(layout, units[("function", "wrap_words")], "stub")
    text = deletion.changed["src/minilib/textops.py"]
    assert (
        'def wrap_words(text, width):\n    """Greedy word wrap into lines of at most `width` characters."""\n    raise '
        "NotImplementedError\n" in text
    )
    assert "candidate" not in text
    assert _import_errors(_apply(deletion, tmp_path), MODULES) == ""


def test_stub_class_stubs_every_method(layout, units, tmp_path):
    deletion = delete_unit(layout, units[("class", "LRUCache")], "stub")
    text = deletion.changed["src/minilib/containers.py"]
    assert "class LRUCache:" in text and "move_to_end" not in text
    assert text.count("raise NotImplementedError") == 4  # __init__, get, put, keys
    assert _import_errors(_apply(deletion, tmp_path), MODULES) == ""


def test_remove_method_leaves_the_class(layout, units, tmp_path):
    deletion = delete_unit(layout, units[("method", "Matrix.determinant")], "remove")
    text = deletion.changed["src/minilib/matrix.py"]
    assert "def determinant" not in text and "def transpose" in text
    assert _import_errors(_apply(deletion, tmp_path), MODULES) == ""


def test_remove_function_drops_its_reexport_and_all_entry(layout, units, tmp_path):
    deletion = delete_unit(layout, units[("function", "slugify")], "remove")
    init = deletion.changed["src/minilib/__init__.py"]
    assert "slugify" not in init and "from minilib.mathops import gcd, lcm" in init
    assert _import_errors(_apply(deletion, tmp_path), MODULES) == ""


def test_remove_feature_deletes_the_private_helpers(layout, units, tmp_path):
    deletion = delete_unit(layout, units[("feature", "parse_settings")], "remove")
    text = deletion.changed["src/minilib/parsing.py"]
    assert "_split_pairs" not in text and "_coerce_scalar" not in text and "def parse_duration" in text
    assert _import_errors(_apply(deletion, tmp_path), MODULES) == ""


@pytest.mark.parametrize(
    ("source", "lost", "fixed"),
    [
        # Nothing lost: left as written (isodate, cssselect and semver: every task's solution restored a comma).
        ('__all__ = [\n    "a",\n    "b",\n]\n', set(), '__all__ = [\n    "a",\n    "b",\n]\n'),
        ('__all__ = [\n    "a",\n    "b",\n]\n', {"b"}, '__all__ = [\n    "a",\n]\n'),
        ('__all__ = ["a", "b"]\n', {"b"}, '__all__ = ["a"]\n'),
        ('__all__ = ("a", "b")\n', {"b"}, '__all__ = ("a", )\n'),  # still a tuple, not the string "a"
    ],
)
def test_an_all_list_changes_only_where_a_name_is_lost_and_keeps_its_commas(source, lost, fixed):
    import libcst as cst

    from task_synth.candidates.import_fixups import _filtered_all

    module = cst.parse_module(source)
    statement = module.body[0]
    small = _filtered_all(statement.body[0], lost)
    assert module.with_changes(body=[statement.with_changes(body=[small])]).code == fixed


def test_file_mode_deletes_module_and_fixes_its_importers(layout, units, tmp_path):
    deletion = delete_unit(layout, units[("module", "minilib.textops")], "file")
    assert deletion.changed["src/minilib/textops.py"] is None
    assert "from minilib.textops import truncate" not in deletion.changed["src/minilib/report.py"]
    remaining = [name for name in MODULES if name != "minilib.textops"]
    assert _import_errors(_apply(deletion, tmp_path), remaining) == ""


def test_every_unit_deletes_in_every_mode_and_the_package_imports(layout, units, tmp_path):
    cases, copies = [], []
    for (kind, qualname), unit in units.items():
        for mode, kinds in MODE_KINDS.items():
            if kind not in kinds:
                continue
            deletion = delete_unit(layout, unit, mode)
            target = tmp_path / f"{mode}-{kind}-{qualname}"
            remaining = [name for name in MODULES if not (mode == "file" and name == qualname)]
            cases.append((mode, qualname))
            copies.append((_apply(deletion, target), remaining))
    errors = dict(zip(cases, _import_errors_of_each(copies)))
    assert len(errors) > 20
    assert {case: error for case, error in errors.items() if error} == {}


def test_one_interpreter_tells_a_broken_copy_from_the_good_ones_around_it(layout, units, tmp_path):
    good = _apply(delete_unit(layout, units[("function", "wrap_words")], "stub"), tmp_path / "good")
    broken = _apply(delete_unit(layout, units[("function", "wrap_words")], "stub"), tmp_path / "broken")
    (broken / "src" / "minilib" / "textops.py").write_text("raise ImportError('broken on purpose')\n")
    errors = _import_errors_of_each([(good, MODULES), (broken, MODULES), (good, MODULES)])
    assert errors[0] == errors[2] == "" and "broken on purpose" in errors[1]


def test_mode_refuses_kinds_it_cannot_delete(layout, units):
    with pytest.raises(DeletionError, match="mode 'file' deletes module"):
        delete_unit(layout, units[("function", "wrap_words")], "file")
