"""Which tests name which identifiers: a static complement to the coverage map."""

from __future__ import annotations

import ast

from proto.python_ast import parse_python


def mention_index(test_texts: dict[str, str]) -> dict[str, set[str]]:
    """Name -> the tests (node ids without parameters) whose function body mentions it, as a name or an attribute."""
    index: dict[str, set[str]] = {}

    def visit(function: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str) -> None:
        for node in ast.walk(function):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name:
                index.setdefault(name, set()).add(f"{prefix}::{function.name}")

    for path, text in test_texts.items():
        tree = parse_python(text)
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node, path)
            elif isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        visit(member, f"{path}::{node.name}")
    return index
