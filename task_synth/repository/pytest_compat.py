"""Which pytest a repository's suite can run under, and which of its own pytest options a synthesis keeps.

pytest 9 removed the py.path hook arguments (`path`, `startdir`) deprecated since 7.0. A conftest that still asks
for one makes pytest 9 refuse the whole suite, so such a repository gets the last pytest that accepts it.
"""

from __future__ import annotations

import ast
import configparser
import logging
import shlex
import tomllib
from pathlib import Path

from proto.python_ast import parse_python

log = logging.getLogger(__name__)

# hook -> the legacy argument pytest 9 no longer passes
LEGACY_HOOK_ARGUMENTS = {
    "pytest_ignore_collect": "path",
    "pytest_collect_file": "path",
    "pytest_pycollect_makemodule": "path",
    "pytest_report_header": "startdir",
    "pytest_report_collectionfinish": "startdir",
}
BEFORE_LEGACY_REMOVAL = "pytest<9"
SKIPPED_DIRS = {".git", ".tox", ".nox", "node_modules", "build", "dist", ".venv", "venv"}


def legacy_hooks(source: str) -> list[str]:
    """`hook(argument)` for each hook in `source` that asks for an argument pytest 9 removed."""
    tree = parse_python(source)  # behind proto's lock: synthesis parses in threads
    if tree is None:
        return []
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in LEGACY_HOOK_ARGUMENTS:
            legacy = LEGACY_HOOK_ARGUMENTS[node.name]
            if legacy in {
                argument.arg for argument in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            }:
                found.append(f"{node.name}({legacy})")
    return found


def conftest_files(root: Path) -> list[Path]:
    """Every conftest.py under `root`, outside virtualenvs and build output."""
    found = []
    for path in sorted(root.rglob("conftest.py")):
        if not SKIPPED_DIRS.intersection(path.relative_to(root).parts[:-1]):
            found.append(path)
    return found


def pytest_requirement(root: Path) -> str:
    """The pytest requirement the repository's conftests can live with: `pytest`, or `pytest<9` for legacy hooks."""
    for conftest in conftest_files(root):
        hooks = legacy_hooks(conftest.read_text(encoding="utf-8", errors="replace"))
        if hooks:
            log.info(
                "%s implements %s, removed in pytest 9: installing %s",
                conftest.relative_to(root),
                ", ".join(hooks),
                BEFORE_LEGACY_REMOVAL,
            )
            return BEFORE_LEGACY_REMOVAL
    return "pytest"


# Only options that change how tests import; selection, plugins and doctests stay ours. Doctests in particular live
# in the files the agent edits, so a doctest can never be a reward test: the agent could rewrite its expected output.
KEPT_OPTIONS = ("--import-mode",)
DOCTEST_OPTIONS = ("--doctest-modules", "--doctest-glob")


def project_addopts(root: Path) -> list[str]:
    """The `addopts` of the config file pytest would read at `root`, split into words ([] when there is none)."""
    for name, section in (
        ("pytest.ini", "pytest"),
        (".pytest.ini", "pytest"),
        ("pyproject.toml", None),
        ("tox.ini", "pytest"),
        ("setup.cfg", "tool:pytest"),
    ):
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if section is None:
            try:
                table = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options")
            except tomllib.TOMLDecodeError:
                continue
            if table is None:
                continue
            addopts = table.get("addopts", "")
            return list(addopts) if isinstance(addopts, list) else shlex.split(str(addopts))
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text)
        except configparser.Error:
            continue
        if parser.has_section(section):
            return shlex.split(parser.get(section, "addopts", fallback=""))
    return []


def kept_options(addopts: list[str]) -> list[str]:
    """The words of `addopts` a synthesized task's test command keeps (see KEPT_OPTIONS)."""
    kept, index = [], 0
    while index < len(addopts):
        word = addopts[index]
        name = word.split("=", 1)[0]
        if name in KEPT_OPTIONS:
            takes_value = "=" not in word and index + 1 < len(addopts)
            kept += addopts[index : index + 2] if takes_value else [word]
            index += 2 if takes_value else 1
            continue
        index += 1
    return kept


def dropped_doctests(addopts: list[str]) -> bool:
    """Whether the project asks for doctests, which a synthesized task never runs."""
    return any(word.split("=", 1)[0] in DOCTEST_OPTIONS for word in addopts)
