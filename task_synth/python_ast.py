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
