"""Parsing from many threads at once: CPython 3.11.7 raised SystemError "AST constructor recursion depth mismatch"
in the env server's grading threads (CI, a cheat that wrote many files), until every parse went through one lock."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from env_server.grading.checks import agrees
from env_server.grading.scan.walker import parse
from env_server.stepping.tools import _parse_feedback
from proto.call_values import literal_text
from proto.python_ast import literal_value, parse_python

SOURCE = "x = " + "(" * 40 + "1" + ")" * 40 + "\n" + "def f(a):\n    return [a for a in range(3) if a]\n" * 50


class _Cycle:
    """Cyclic garbage whose finalizer runs Python code, so a collection during parsing can hand the GIL over."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        for _ in range(20):
            pass


@pytest.fixture
def eager_thread_switches() -> Iterator[None]:
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)


def _in_threads(parse_once: Callable[[], object], threads: int = 4, rounds: int = 60) -> list[BaseException]:
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(rounds):
            try:
                parse_once()
            except BaseException as error:
                errors.append(error)
                return
            _Cycle(), _Cycle()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


@pytest.mark.usefixtures("eager_thread_switches")
def test_the_servers_parsers_side_by_side_in_threads_raise_nothing() -> None:
    def mixed() -> None:
        assert parse(SOURCE) is not None
        assert _parse_feedback("/workspace/m.py", SOURCE) is None
        assert parse_python(SOURCE) is not None

    assert _in_threads(mixed) == []


@pytest.mark.usefixtures("eager_thread_switches")
def test_literals_read_back_in_threads_raise_nothing() -> None:
    value = {"key": [(1, 2.5, "three")] * 5, "nested": [[[[[1]]]]]}

    def read_back() -> None:
        text = literal_text(value)
        assert text is not None
        assert agrees(literal_value(text), value)
        assert parse_python(text) is not None

    assert _in_threads(read_back) == []


def test_text_that_is_not_python_gives_none_or_the_parsers_own_error() -> None:
    assert parse_python("def (:") is None
    assert parse_python("x = 1\0") is None
    assert _parse_feedback("/workspace/pkg/m.py", "def (:") == "pkg/m.py no longer parses: line 1: invalid syntax"
    with pytest.raises(ValueError):
        literal_value("__import__('os')")


@pytest.mark.usefixtures("eager_thread_switches")
def test_synthesis_reads_docstrings_and_all_lists_in_threads_without_an_error() -> None:
    """libcst's `get_docstring` and `evaluated_value` call ast.literal_eval: synthesis calls them from its job
    threads beside locked parses (a minilib run raised the SystemError in one of four tries before)."""
    from libcst import parse_module

    from task_synth.candidates.import_fixups import _filtered_all
    from task_synth.store.problem_statement import docstring_of

    module = parse_module('def f():\n    """Say what f does."""\n    return 1\n__all__ = ["f", "g"]\n')
    function, statement = module.body[0], module.body[1]

    def mixed() -> None:
        assert docstring_of(function) == "Say what f does."
        assert _filtered_all(statement.body[0], {"g"}) is not None
        assert parse_python(SOURCE) is not None

    assert _in_threads(mixed) == []
