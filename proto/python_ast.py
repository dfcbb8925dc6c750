"""`ast` behind one lock: CPython 3.11 before 3.11.8 corrupts its recursion check when threads parse at once.

The symptom is a SystemError "AST constructor recursion depth mismatch" in whichever thread parses next
(python/cpython#106905); the env server grades and checks syntax in worker threads, and synthesis runs jobs in threads.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()


def parse_or_raise(text: str | bytes) -> ast.Module:
    """The module's AST; raises SyntaxError, ValueError (a null byte), RecursionError or MemoryError as ast.parse."""
    with _LOCK:
        return ast.parse(text)


def parse_python(text: str | bytes) -> ast.Module | None:
    """The module's AST, or None when the text is not Python this interpreter can parse."""
    try:
        return parse_or_raise(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def literal_value(text: str) -> object:
    """`ast.literal_eval(text)` behind the same lock; raises ValueError or SyntaxError when `text` is no literal."""
    with _LOCK:
        return ast.literal_eval(text)


@contextmanager
def parsing() -> Iterator[None]:
    """Hold the lock around another library's code that parses with `ast` (libcst's `get_docstring` and
    `evaluated_value` call `ast.literal_eval`)."""
    with _LOCK:
        yield
