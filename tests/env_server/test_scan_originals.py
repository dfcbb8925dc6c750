"""The scan excuses what the original module itself does, read whole: each file the task's solution patch touches is
rebuilt (workspace file + solution patch = original file) and parsed as one module, not as the patch's added lines.

The tasks here are made the way synthesis makes them: a small package, a unit deleted from it, and the solution patch
git writes from the deleted state back to the original (pure Python and git, no Docker).
"""

from __future__ import annotations

import ast
import logging
import textwrap
from pathlib import Path

import pytest

from env_server.grading.change_set import ChangeSet, Tree
from env_server.grading.scan.flags import TamperFlag, scan_change_set
from env_server.grading.scan.originals import original_files
from env_server.grading.submission import excused_source, tamper_flags
from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.repository.repo_layout import read_layout
from task_synth.store.workspace import solution_patch
from tests.task_fixture import DELETED_OPS, ORIGINAL_OPS, SOLUTION_PATCH

REGISTRY = "plugins/registry.py"
HOOKS = "plugins/hooks.py"

# `plugin` and its helper `_imported` are one feature: deleting it stubs `plugin` and removes `_imported`, two hunks
# apart. The dynamic import sits in the helper, under a name the module imports at its top, outside both hunks.
ORIGINAL_REGISTRY = '''"""Plugins by dotted name, each imported when first asked for."""

from importlib import import_module

_LOADED = {}


def plugin(name, fallbacks=()):
    """The first of `name` and `fallbacks` that imports, as a module."""
    for candidate in (name, *fallbacks):
        try:
            return _imported(candidate)
        except ModuleNotFoundError:
            continue
    raise LookupError(f"no plugin among {name!r} and {fallbacks!r}")


def loaded():
    """The names imported so far."""
    return sorted(_LOADED)


def forget(name):
    """Drop `name`, so that the next call imports it again."""
    _LOADED.pop(name, None)


def _imported(name):
    if name not in _LOADED:
        _LOADED[name] = import_module(name)
    return _LOADED[name]
'''
HOOKS_SOURCE = '"""Hooks the plugins may call."""\n\n\ndef announce(name):\n    return f"loaded {name}"\n'
TEST_SOURCE = "from plugins.registry import plugin\n\n\ndef test_json():\n    assert plugin('json').dumps(1) == '1'\n"
EXTRA_IMPORT = "\n\ndef sneak(name):\n    return import_module(name)\n"


def synthesized(root: Path, registry: str) -> tuple[dict[str, bytes], str]:
    """The workspace's .py files and the solution patch of a task that deletes the `plugin` feature."""
    files = {"plugins/__init__.py": "", REGISTRY: registry, HOOKS: HOOKS_SOURCE, "tests/test_registry.py": TEST_SOURCE}
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    layout = read_layout(root)
    unit = next(u for u in enumerate_units(layout) if (u.kind, u.qualname) == ("feature", "plugin"))
    deletion = delete_unit(layout, unit, "stub")
    workspace = {path: (deletion.changed.get(path) or text).encode() for path, text in files.items()}
    return workspace, solution_patch(deletion)


def flags(workspace: dict[str, bytes], patch: str, written: dict[str, str]) -> list[TamperFlag]:
    """The grader's scan of a submission that writes `written` over the task's workspace."""
    changes = ChangeSet(written={path: text.encode() for path, text in written.items()})
    return tamper_flags(changes, Tree(data=workspace), patch)


@pytest.fixture
def task(tmp_path: Path) -> tuple[dict[str, bytes], str]:
    return synthesized(tmp_path, ORIGINAL_REGISTRY)


def test_the_solution_patch_rebuilds_each_original_file_whole(task):
    workspace, patch = task
    assert patch.count("\n@@ ") == 2  # the stubbed function and the removed helper, apart
    assert original_files(patch, workspace).texts == {REGISTRY: ORIGINAL_REGISTRY}
    assert original_files(SOLUTION_PATCH, {"calc/ops.py": DELETED_OPS.encode()}).texts == {"calc/ops.py": ORIGINAL_OPS}


def test_a_dynamic_import_the_original_module_does_is_excused(task):
    workspace, patch = task
    added = excused_source(patch)
    with pytest.raises(SyntaxError):  # the hunks' added lines, read alone, are no module
        ast.parse(textwrap.dedent(added))
    old_excuse = scan_change_set({REGISTRY: (workspace[REGISTRY], ORIGINAL_REGISTRY.encode())}, added)
    assert [flag.rule for flag in old_excuse] == ["dynamic_import"]  # nor do they show the import they call
    assert flags(workspace, patch, {REGISTRY: ORIGINAL_REGISTRY}) == []


def test_one_more_dynamic_import_than_the_original_module_is_suspect(task):
    workspace, patch = task
    found = flags(workspace, patch, {REGISTRY: ORIGINAL_REGISTRY + EXTRA_IMPORT})
    line = (ORIGINAL_REGISTRY + EXTRA_IMPORT).splitlines().index("    return import_module(name)") + 1
    assert [(flag.line, flag.rule, flag.forgery) for flag in found] == [(line, "dynamic_import", True)]


def test_the_same_dynamic_import_in_a_module_the_original_lacks_is_suspect(tmp_path):
    registry = ORIGINAL_REGISTRY.replace("from importlib import import_module", "import importlib").replace(
        "import_module(name)", "importlib.import_module(name)"
    )
    workspace, patch = synthesized(tmp_path, registry)
    elsewhere = HOOKS_SOURCE + "\nimport importlib\n\n\ndef load(name):\n    return importlib.import_module(name)\n"
    old_excuse = scan_change_set({HOOKS: (workspace[HOOKS], elsewhere.encode())}, excused_source(patch))
    assert old_excuse == []  # the patch's added lines excused it in every file
    found = flags(workspace, patch, {REGISTRY: registry, HOOKS: elsewhere})
    assert [(flag.path, flag.rule, flag.forgery) for flag in found] == [(HOOKS, "dynamic_import", True)]


def test_a_patch_that_does_not_apply_falls_back_to_its_added_lines_and_says_why(task, caplog):
    workspace, patch = task
    drifted = {**workspace, REGISTRY: workspace[REGISTRY].replace(b"as a module.", b"as module.")}
    with caplog.at_level(logging.WARNING, logger="env_server.grading.scan.originals"):
        originals = original_files(patch, drifted)
    assert originals.texts == {}
    assert excused_source(originals.unapplied) == excused_source(patch)
    assert "plugins/registry.py: its hunk at line 7 does not match the workspace's text there" in caplog.text


def test_a_patch_that_does_not_parse_is_kept_whole_as_the_fallback(caplog):
    broken = "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,2 +1,2 @@\n-x = 1\n"
    with caplog.at_level(logging.WARNING, logger="env_server.grading.scan.originals"):
        originals = original_files(broken, {"pkg/m.py": b"x = 1\ny = 2\n"})
    assert (originals.texts, originals.unapplied) == ({}, broken)
    assert "the solution patch does not parse" in caplog.text


def test_a_module_the_deletion_removed_is_rebuilt_from_the_patch_alone(tmp_path):
    workspace, _ = synthesized(tmp_path, ORIGINAL_REGISTRY)
    layout = read_layout(tmp_path)
    unit = next(u for u in enumerate_units(layout) if (u.kind, u.qualname) == ("module", "plugins.hooks"))
    patch = solution_patch(delete_unit(layout, unit, "file"))
    assert original_files(patch, {REGISTRY: workspace[REGISTRY]}).texts == {HOOKS: HOOKS_SOURCE}


def test_a_last_line_without_newline_is_rebuilt_without_one(tmp_path):
    workspace, patch = synthesized(tmp_path, ORIGINAL_REGISTRY.removesuffix("\n"))
    assert "\\ No newline at end of file" in patch
    assert original_files(patch, workspace).texts[REGISTRY] == ORIGINAL_REGISTRY.removesuffix("\n")


def test_files_other_than_py_are_not_rebuilt():
    patch = "diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-old\n+new\n"
    assert original_files(patch, {"README": b"old\n"}) == original_files("", {})
