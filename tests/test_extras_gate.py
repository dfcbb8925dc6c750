"""The train extra is gated in one place (tests/conftest.py): no test file skips on an import of its own, and every
test module that imports the extra at its top is marked `train`, so that `make test-unit` (the core install) leaves
it out and the logic lane of `make test` picks it up. Read with ast (no extra needed)."""

import ast
from pathlib import Path

from tests.conftest import TRAIN_PACKAGES

TESTS = Path(__file__).parent


def _top_level_imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _marked_train(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            return "train" in ast.unparse(node.value)
    return False


def test_no_test_file_skips_on_an_import_of_its_own():
    calls = [
        f"{path.relative_to(TESTS)}:{node.lineno}"
        for path in TESTS.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip"
    ]
    assert calls == []


def test_every_test_module_that_imports_the_train_extra_at_its_top_is_marked_train():
    unmarked = []
    for path in TESTS.rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if _top_level_imports(tree) & set(TRAIN_PACKAGES) and not _marked_train(tree):
            unmarked.append(str(path.relative_to(TESTS)))
    assert unmarked == []


def test_the_files_the_unit_lane_skips_unread_have_every_test_marked_with_a_need():
    """`make test-unit` skips, without importing them, the files whose text declares a needed mark at module level
    (a grep in the Makefile). Each must truly carry it on every test, or the lane would lose unit tests unseen."""
    import re

    makefile = (TESTS.parent / "Makefile").read_text(encoding="utf-8")
    needs = re.search(r"^NEEDS := (.+)$", makefile, re.MULTILINE).group(1).split(" or ")
    declared = re.compile(rf"^pytestmark = .*pytest\.mark\.({'|'.join(needs)})\b", re.MULTILINE)
    skipped, unsound = 0, []
    for path in TESTS.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if not declared.search(text):
            continue
        skipped += 1
        marks = [
            ast.unparse(node.value)
            for node in ast.parse(text).body
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
        ]
        if not any(re.search(rf"\bmark\.({'|'.join(needs)})\b", mark) for mark in marks):
            unsound.append(str(path.relative_to(TESTS)))
    assert unsound == []
    assert skipped > 40  # the engine's tests, the trainer's and the stacks'
