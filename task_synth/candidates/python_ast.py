"""`ast.parse` behind a lock: CPython 3.11 before 3.11.8 corrupts its recursion check when threads parse at once."""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse_python(text: str) -> ast.Module | None:
    """The module's AST, or None when the text is not valid Python."""
    with _LOCK:
        try:
            return ast.parse(text)
        except (SyntaxError, ValueError):
            return None


def literal_value(text: str) -> object:
    """`ast.literal_eval(text)` behind the same lock; raises ValueError or SyntaxError when `text` is no literal."""
    with _LOCK:
        return ast.literal_eval(text)
