"""The task's problem statement, from a template: what is missing, its signature, and where the tests use it."""

from __future__ import annotations

import re

import libcst as cst

from proto.python_ast import parsing
from task_synth.candidates.deletion import Deletion

MAX_LISTED = 6


def _find(module: cst.Module, qualname: str) -> cst.FunctionDef | cst.ClassDef | None:
    owner, _, member = qualname.partition(".")
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.name.value == owner:
            if not member:
                return statement
            for inner in statement.body.body:
                if isinstance(inner, cst.FunctionDef) and inner.name.value == member:
                    return inner
    return None


def docstring_of(node: cst.FunctionDef | cst.ClassDef) -> str | None:
    """The definition's docstring, read under the parse lock: libcst reads it with ast.literal_eval, and synthesis
    builds tasks in threads."""
    with parsing():
        return node.get_docstring()


def signature(node: cst.FunctionDef | cst.ClassDef) -> str:
    """The definition line(s) with an ellipsis body and no decorators."""
    header = node.with_changes(
        decorators=[], body=cst.SimpleStatementSuite([cst.Expr(cst.Ellipsis())]), leading_lines=[]
    )
    return cst.Module(body=[header]).code.strip()


def _public_signatures(module: cst.Module) -> list[str]:
    return [
        signature(statement)
        for statement in module.body
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and not statement.name.value.startswith("_")
    ]


def _usages(test_texts: dict[str, str], name: str) -> list[str]:
    pattern = re.compile(rf"\b{re.escape(name)}\b")
    found = []
    for path, text in sorted(test_texts.items()):
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line) and not line.lstrip().startswith(("import ", "from ")):
                found.append(f"- {path}:{number}: {line.strip()}")
    return found[:MAX_LISTED]


def problem_statement(deletion: Deletion, module_name: str, fail_to_pass: list[str], test_texts: dict[str, str]) -> str:
    """Plain text an agent gets at reset."""
    unit = deletion.unit
    lines: list[str] = []
    if unit.parts:
        lines += _group_lines(deletion, module_name)
    elif unit.kind == "module":
        original = cst.parse_module(deletion.original[unit.path])
        others = sorted(path for path in deletion.changed if path != unit.path)
        lines.append(
            f"The module `{module_name}` (`{unit.path}`) is missing. Recreate it so that the test suite passes again."
        )
        if others:
            lines.append(f"Imports of it were also removed from: {', '.join(f'`{p}`' for p in others)}; restore them.")
        lines += ["", "It defined:", *(f"    {sig}" for sig in _public_signatures(original))]
    else:
        node = _find(cst.parse_module(deletion.original[unit.path]), unit.qualname)
        kind = {"feature": "function", "method": "method", "class": "class", "function": "function"}[unit.kind]
        where = f"`{unit.path}` (module `{module_name}`)"
        if deletion.mode == "stub":
            lines.append(
                f"The {kind} `{unit.qualname}` in {where} is not implemented: it raises `NotImplementedError`."
            )
        else:
            lines.append(f"The {kind} `{unit.qualname}` has been removed from {where}.")
        lines.append("Implement it so that the test suite passes again.")
        if unit.helpers:
            lines.append("The private helper functions it relied on are gone as well; write whatever helpers you need.")
        if node is not None:
            lines += ["", "Signature:", f"    {signature(node)}"]
            docstring = docstring_of(node)
            if deletion.mode == "stub" and docstring:
                lines += ["", "Docstring:", *(f"    {line}" for line in docstring.splitlines())]
            if isinstance(node, cst.ClassDef):
                methods = [signature(m) for m in node.body.body if isinstance(m, cst.FunctionDef)]
                lines += ["", "Its methods:", *(f"    {sig}" for sig in methods)]
    lines += ["", f"Tests that fail now ({len(fail_to_pass)}):", *(f"- {test}" for test in fail_to_pass[:MAX_LISTED])]
    if len(fail_to_pass) > MAX_LISTED:
        lines.append(f"- ... and {len(fail_to_pass) - MAX_LISTED} more")
    # A dunder is reached through syntax, not its name: `__init__` would list every test helper's own constructor.
    names = [piece.qualname.rsplit(".", 1)[-1] for piece in unit.pieces]
    usages = [found for name in names if not name.startswith("__") for found in _usages(test_texts, name)]
    usages = list(dict.fromkeys(usages))[:MAX_LISTED]
    if usages:
        lines += ["", "Where the tests use it:", *usages]
    return "\n".join(lines) + "\n"


def _group_lines(deletion: Deletion, module_name: str) -> list[str]:
    """What a group's statement says of it: every part, with its signature and (stubbed) docstring, and its file
    when the parts span several."""
    parts = deletion.unit.parts
    originals = {path: cst.parse_module(deletion.original[path]) for path in dict.fromkeys(p.path for p in parts)}
    spans = len(originals) > 1
    place = f"`{deletion.unit.path}` (module `{module_name}`)"
    if deletion.mode == "stub":
        where = "" if spans else f" in {place}"
        lines = [f"These functions and methods{where} are not implemented: each raises `NotImplementedError`."]
    else:
        lines = [f"These functions and methods have been removed{'' if spans else f' from {place}'}."]
    lines += [
        "Implement them so that the test suite passes again. Together they make one feature, so the tests "
        "that fail need all of them.",
        "",
    ]
    for piece in parts:
        node = _find(originals[piece.path], piece.qualname)
        named = f"- `{piece.qualname}`" + (f" in `{piece.path}`" if spans else "")
        lines.append(named + (f": `{signature(node)}`" if node is not None else ""))
        docstring = None
        if node is not None and deletion.mode == "stub":
            docstring = docstring_of(node)
        lines += [f"      {line}" for line in (docstring or "").splitlines()]
    return lines
