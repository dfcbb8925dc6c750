"""What the recorder wrote, read as calls: each a check with a hash-order-free key and outcome, linked to the F2P
test that made it, each distinct call once.

A call is one call of a deleted function or method, or, for a deleted class, the program one test ran on its
instances (proto.call_values.replay_program); both become one IoCheck.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from proto.call_values import MAX_DESCRIPTION, MAX_PROGRAM_TEXT, MAX_RECIPE_TEXT, MAX_STEPS, MAX_TEXT, RECIPE_KINDS
from proto.python_ast import literal_value
from proto.tasks import IoCheck

MAX_CHECKS = 8  # checks of one unit linked to the visible test that made their call
CallKey = tuple[str, str, str, str]  # module, qualname, args, kwargs (with the pickled inputs)
# What a call raises once the unit is deleted (a stub, a removed name, a missing module): a check expecting one of
# these would pass without the solution.
DELETION_EXCEPTIONS = {"NotImplementedError", "AttributeError", "NameError", "ImportError", "ModuleNotFoundError"}


@dataclass(frozen=True)
class Call:
    """One call: the check it makes (its `test` the F2P test that made it, None for an unseen call), and
    hash-order-free texts to compare calls by."""

    check: IoCheck
    key: tuple[str, str, str, str]  # module, qualname, args, kwargs (with the pickled inputs)
    outcome: tuple[str | None, str | None, str | None, str | None]  # result, raises, state after, arguments after
    internal: bool = False  # the library made it while a test ran: no test shows it, so it is an unseen call


def canonical(value: object) -> str:
    """A text of a literal value that does not depend on set or dict order, so that runs under two hash seeds
    compare."""
    if isinstance(value, dict):
        return "dict{" + ", ".join(sorted(f"{canonical(key)}: {canonical(item)}" for key, item in value.items())) + "}"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}{{" + ", ".join(sorted(canonical(item) for item in value)) + "}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__}[" + ", ".join(canonical(item) for item in value) + "]"
    return repr(value)


def parsed_call(raw: object, functions: dict[str, list[str]]) -> Call | None:
    """One entry of the recorder's output as a Call; None when it is malformed or names no recorded function."""
    if not isinstance(raw, dict) or not (raw.get("test") is None or isinstance(raw.get("test"), str)):
        return None
    try:
        check = IoCheck.model_validate({name: raw[name] for name in IoCheck.model_fields if name in raw})
        if check.steps is not None:
            if check.qualname not in functions.get(check.module, ()) or "." in check.qualname:
                return None
            return _parsed_program(check, raw.get("internal") is True)
        if not _within_limits(check, functions):
            return None
        args, kwargs = literal_value(check.args), literal_value(check.kwargs)
        described = [
            None if text is None else canonical(literal_value(text))
            for text in (None if check.raises else check.result, check.state, check.args_after)
        ]
    except (KeyError, ValidationError, ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not _well_formed(check, args, kwargs):
        return None
    outcome = (described[0], check.raises, described[1], described[2])
    return Call(check, check_key(check), outcome, internal=raw.get("internal") is True)


def _within_limits(check: IoCheck, functions: dict[str, list[str]]) -> bool:
    """Whether a recorded call is of a recorded function, has one outcome, and its texts are no longer than allowed."""
    if check.qualname not in functions.get(check.module, ()) or (check.result is None) == (check.raises is None):
        return False
    if any(len(text) > (MAX_RECIPE_TEXT if check.recipes else MAX_TEXT) for text in (check.args, check.kwargs)):
        return False
    return not any(len(text or "") > MAX_DESCRIPTION for text in (check.result, check.state, check.args_after))


def _well_formed(check: IoCheck, args: object, kwargs: object) -> bool:
    """Whether a call's arguments (as read back), raise, drawn items and pickled inputs have the shapes a check
    needs."""
    if type(args) is not tuple or type(kwargs) is not dict or not all(type(name) is str for name in kwargs):
        return False
    if check.recipes and not all(map(is_recipe, [*args, *kwargs.values()])):
        return False
    if check.raises is not None and (not check.raises.isidentifier() or check.raises in DELETION_EXCEPTIONS):
        return False
    if check.take is not None and not _drawn_outcome(check):
        return False
    method = "." in check.qualname
    return not (
        (method and (check.inputs is None or check.state is None)) or (check.args_after and check.inputs is None)
    )


def is_recipe(value: object) -> bool:
    """Whether `value` has a recipe's shape (proto.call_values.built): a tuple led by a kind of recipe."""
    return type(value) is tuple and len(value) >= 2 and value[0] in RECIPE_KINDS


def check_key(check: IoCheck) -> tuple[str, str, str, str]:
    """What tells calls apart, free of hash order: the function, the arguments, the pickled inputs and a program's
    steps."""
    args, kwargs = canonical(literal_value(check.args)), canonical(literal_value(check.kwargs))
    steps = canonical(literal_value(check.steps)) if check.steps is not None else ""
    take = "" if check.take is None else f"|{check.take}"  # a test that drew 2 items and one that drew all differ
    recipes = "|recipes" if check.recipes else ""
    beside = "" if check.beside is None else f"|beside {canonical(literal_value(check.beside))}"
    return (check.module, check.qualname, args, f"{kwargs}|{check.inputs or ''}|{steps}{take}{recipes}{beside}")


def unique_calls(calls: list[Call]) -> list[Call]:
    """Each distinct call once, in the order first seen; a call seen with two outcomes is no check and is dropped."""
    first: dict[tuple[str, str, str, str], Call] = {}
    conflicting = set()
    for call in calls:
        if first.setdefault(call.key, call).outcome != call.outcome:
            conflicting.add(call.key)
    return [call for key, call in first.items() if key not in conflicting]


def linked_calls(calls: list[Call], fail_to_pass: list[str]) -> list[Call]:
    """The unique calls, each linked to the first F2P test (by sorted node id) that made it; calls the tests make
    themselves first, then those only the library made while a test ran (internal: no test shows them).

    A call that no F2P test made (one at collection, say) is dropped: it is visible, so it is no unseen call either.
    """
    visible = set(fail_to_pass)
    tests: dict[tuple[str, str, str, str], str] = {}
    direct = set()
    for call in calls:
        if call.check.test in visible:
            tests[call.key] = min(tests.get(call.key, call.check.test), call.check.test)
            if not call.internal:
                direct.add(call.key)
    linked = [
        replace(call, check=call.check.model_copy(update={"test": tests[call.key]}), internal=call.key not in direct)
        for call in unique_calls(calls)
        if call.key in tests
    ]
    return sorted(linked, key=lambda call: call.internal)


def calls_in_both(first: list[Call], second: list[Call]) -> list[Call]:
    """The distinct calls of `first` that `second` made with the same outcome, in `first`'s order."""
    outcomes = {call.key: call.outcome for call in unique_calls(second)}
    return [call for call in unique_calls(first) if outcomes.get(call.key) == call.outcome]


def _in_turn(calls: list[Call], group: Callable[[Call], Hashable]) -> list[Call]:
    """`calls` reordered so that every group gives its first call, then every group its second, and so on."""
    turns: dict[Hashable, int] = {}
    ranked = []
    for order, call in enumerate(calls):
        turns[group(call)] = turns.get(group(call), -1) + 1
        ranked.append((turns[group(call)], order, call))
    return [call for _, _, call in sorted(ranked, key=lambda item: item[:2])]


def selected_checks(calls: list[Call], limit: int = MAX_CHECKS) -> list[IoCheck]:
    """Up to `limit` checks, taking each function's calls in turn and, within a function, each test's calls in turn."""
    spread = _in_turn(calls, lambda call: call.check.test)
    return [call.check for call in _in_turn(spread, lambda call: call.key[:2])[:limit]]


def _parsed_program(check: IoCheck, internal: bool) -> Call | None:
    """A program of a deleted class as a Call; None when its steps, outcomes or state are malformed, or a step
    raised what the deleted class's stand-in would raise too."""
    texts = (check.steps or "", check.result or "", check.state or "")
    if check.raises is not None or any(len(text) > MAX_PROGRAM_TEXT for text in texts):
        return None
    if not all(type(name) is str and name.isidentifier() for name in check.reads):
        return None
    try:
        steps, outcomes, state = (literal_value(text) for text in texts)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if type(steps) is not tuple or type(outcomes) is not tuple or type(state) is not tuple:
        return None
    if not 0 < len(steps) == len(outcomes) <= MAX_STEPS or not all(map(_is_step, steps, range(len(steps)))):
        return None
    if not all(_is_outcome(outcome) for outcome in outcomes):
        return None
    return Call(check, check_key(check), (canonical(outcomes), None, canonical(state), None), internal=internal)


def _is_step(step: object, index: int) -> bool:
    """Whether `step` is one a replay can run: its target and refs name earlier steps, its arguments are literals."""
    if type(step) is not tuple or not step or step[0] not in ("new", "call", "get"):
        return False
    shape = {"new": (str, tuple, dict, tuple), "call": (str, int, str, tuple, dict, tuple), "get": (str, int, str)}
    if len(step) != len(shape[step[0]]) or not all(type(part) is kind for part, kind in zip(step, shape[step[0]])):
        return False
    if step[0] != "new" and not (-1 <= step[1] < index and step[2].isidentifier()):
        return False
    refs = step[-1] if step[0] != "get" else ()
    return all(
        type(ref) is tuple and len(ref) == 2 and type(ref[0]) in (int, str) and type(ref[1]) is int
        and 0 <= ref[1] < index
        for ref in refs
    )  # fmt: skip


def _is_outcome(outcome: object) -> bool:
    if type(outcome) is not tuple or not outcome or outcome[0] not in ("returned", "raised"):
        return False
    if outcome[0] == "returned":
        return len(outcome) in (1, 2)
    return (
        len(outcome) == 2
        and type(outcome[1]) is str
        and outcome[1].isidentifier()
        and (outcome[1] not in DELETION_EXCEPTIONS)
    )


def _drawn_outcome(check: IoCheck) -> bool:
    """Whether a generator's check holds what its replay gives: one `_is_drawn` outcome, or with `beside` a pair of
    them and a second call's literal `(args, kwargs)`."""
    result = literal_value(check.result or "None")
    if check.beside is None:
        return _is_drawn(result, check.take or 0)
    beside = literal_value(check.beside)
    if type(beside) is not tuple or len(beside) != 2 or type(beside[0]) is not tuple or type(beside[1]) is not dict:
        return False
    return type(result) is tuple and len(result) == 2 and all(_is_drawn(part, check.take or 0) for part in result)


def _is_drawn(result: object, take: int) -> bool:
    """Whether `result` is what a generator's replay gives: `('generated', items, end)`, no more than `take` items."""
    if type(result) is not tuple or len(result) != 3 or result[0] != "generated" or type(result[1]) is not tuple:
        return False
    end, count = result[2], len(result[1])
    if end is None:
        return count == take
    return count < take and (end == "ended" or _is_outcome(end))  # it ended before the draws ran out


def raised_in(call: Call) -> set[str]:
    """The exception classes a call raised: its own, any step's of a program, or what ended a generator."""
    if call.check.take is not None:
        drawn: Any = literal_value(call.check.result or "None")  # ('generated', items, end): parsed_call checked it
        ends = [part[2] for part in drawn] if call.check.beside is not None else [drawn[2]]
        return {end[1] for end in ends if type(end) is tuple}
    if call.check.steps is None:
        return {call.check.raises} if call.check.raises else set()
    outcomes: Any = literal_value(call.check.result or "()")  # a tuple of outcomes: parsed_call checked it
    return {outcome[1] for outcome in outcomes if outcome[0] == "raised"}
