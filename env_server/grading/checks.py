"""Out-of-process checks: the recorded calls of the deleted unit go into the container as inputs only; the outcomes
come back as data and are judged here, against the original's outcomes, which never leave the server.

Values travel described (proto.call_values: literals as themselves, objects as their class and attributes). A
returned value agrees when its description equals the original's as `==` on plain literals says, floats within a
relative 1e-9; an exception agrees when the original's class is the raised one or one of its bases, as `except`
and `pytest.raises` see it; a method's receiver must also end with the original's
attributes as they were after the call, and pickled arguments as the original left them. A deleted class's program
agrees step by step, and its instances by the attributes the visible tests read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from proto.evidence import is_secret
from proto.python_ast import literal_value
from proto.tasks import IoCheck

CheckOutcome = Literal["passed", "failed", "missing"]
MAX_LITERAL = 64 * 1024  # longer texts are not read back: no recorded value is that long


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict, and what the submission gave, for the episode viewer."""

    check: IoCheck
    outcome: CheckOutcome
    got: str

    @property
    def unseen(self) -> bool:
        return is_secret(self.check)


def check_inputs(checks: list[IoCheck]) -> list[dict[str, object]]:
    """What the check child is told of each check: the call (a class's program), never its expected outcome."""
    return [
        {
            "module": c.module,
            "qualname": c.qualname,
            "args": c.args,
            "kwargs": c.kwargs,
            "inputs": c.inputs,
            "steps": c.steps,
            "reads": c.reads,
            "take": c.take,
            "recipes": c.recipes,
            "beside": c.beside,
        }
        for c in checks
    ]


def _literal(text: object) -> tuple[bool, Any]:
    if not isinstance(text, str) or len(text) > MAX_LITERAL:
        return False, None
    try:
        return True, literal_value(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def agrees(expected: Any, got: Any) -> bool:
    """Whether two plain literal values are equal, floats approximately; lists and tuples do not stand for each
    other, as `==` has it."""
    numbers = (int, float, complex)
    if isinstance(expected, numbers) and isinstance(got, numbers):
        if isinstance(expected, float) or isinstance(got, float):
            return math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-12)  # type: ignore[arg-type]
        return bool(expected == got)
    if type(expected) in (list, tuple) and type(got) is type(expected):
        return len(expected) == len(got) and all(agrees(a, b) for a, b in zip(expected, got, strict=True))
    if type(expected) is dict and type(got) is dict:
        return expected.keys() == got.keys() and all(agrees(value, got[key]) for key, value in expected.items())
    try:
        return bool(expected == got)
    except Exception:  # plain literals compare; anything else is no agreement
        return False


def judge(check: IoCheck, record: dict[str, Any] | None) -> CheckResult:
    """The verdict on one check from the child's record of its call (None: no record came back)."""
    if record is None:
        return CheckResult(check, "missing", "no outcome")
    if record.get("timeout"):
        return CheckResult(check, "failed", "ran out of time")
    if check.steps is not None:
        return _judge_program(check, record)
    raised = record.get("raised")
    if check.raises is not None or raised is not None:
        got = f"raised {raised}" if raised else f"returned {str(record.get('returned'))[:200]}"
        return CheckResult(check, "passed" if _raised_as(check.raises, record) else "failed", got)
    readable, value = _literal(record.get("returned"))
    _, expected = _literal(check.result)
    if check.take is not None and readable:
        value = _drawn_as(expected, value, _bases_of(record), pair=check.beside is not None)
    got = f"returned {record.get('returned')!s:.200}" if readable else f"returned a {record.get('kind', '?')!s:.60}"
    if not readable or not agrees(expected, value):
        return CheckResult(check, "failed", got)
    if check.state is not None and not _state_agrees(check.state, record.get("state")):
        return CheckResult(check, "failed", f"{got}, left the object as {record.get('state')!s:.200}")
    if check.args_after is not None:
        after_readable, after = _literal(record.get("args_after"))
        if not after_readable or not agrees(_literal(check.args_after)[1], after):
            return CheckResult(check, "failed", f"{got}, left its arguments as {record.get('args_after')!s:.200}")
    return CheckResult(check, "passed", got)


def _raised_as(expected: str | None, record: dict[str, Any]) -> bool:
    """Whether the call raised the original's exception class or a class below it."""
    raised, bases = record.get("raised"), record.get("bases")
    if expected is None or not isinstance(raised, str):
        return False
    return raised == expected or (isinstance(bases, list) and expected in bases)


def _bases_of(record: dict[str, Any]) -> dict[str, list[str]]:
    """The bases of each class the replay saw raised, by its name; {} where the record holds none that read."""
    found = record.get("bases_of")
    if type(found) is not dict:
        return {}
    return {name: bases for name, bases in found.items() if type(name) is str and type(bases) is list}


def _raised_agrees(expected: Any, got: Any, bases_of: dict[str, list[str]]) -> bool:
    """Whether `('raised', got class)` agrees with `('raised', expected class)`: the same class, or one below it."""
    if type(expected) is not tuple or type(got) is not tuple or len(expected) != 2 or len(got) != 2:
        return False
    if expected[0] != "raised" or got[0] != "raised":
        return False
    return expected[1] == got[1] or expected[1] in bases_of.get(got[1], ())


def _drawn_as(expected: Any, got: Any, bases_of: dict[str, list[str]], pair: bool = False) -> Any:
    """A generator's draws with their end read as the caller sees it: a subclass of the class that ended the
    original's stands for it. With `pair`, each of two generators drawn in turn."""
    if pair:
        if not all(type(value) is tuple and len(value) == 2 for value in (expected, got)):
            return got
        return tuple(_drawn_as(mine, theirs, bases_of) for mine, theirs in zip(expected, got, strict=True))
    shaped = all(type(value) is tuple and len(value) == 3 for value in (expected, got))
    if shaped and _raised_agrees(expected[2], got[2], bases_of):
        return (*got[:2], expected[2])
    return got


def _judge_program(check: IoCheck, record: dict[str, Any]) -> CheckResult:
    """A class's program agrees when every step's outcome does (a step whose value no description stands for only
    has to return) and its instances end with the original's attributes, as far as the visible tests read them."""
    if record.get("raised"):
        return CheckResult(check, "failed", f"could not run: {record['raised']!s:.60}")
    _, expected = _literal(check.result)
    readable, got = _literal(record.get("returned"))
    if not readable or type(got) is not tuple or type(expected) is not tuple or len(got) != len(expected):
        return CheckResult(check, "failed", "gave no outcome for each step")
    steps = _literal(check.steps)[1]
    bases_of = _bases_of(record)
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        if not _step_agrees(want, have) and not _raised_agrees(want, have, bases_of):
            name = steps[index][2] if steps[index][0] != "new" else check.qualname
            return CheckResult(check, "failed", f"step {index + 1} ({name}) {_shown(have)}")
    _, state = _literal(check.state)
    state_readable, got_state = _literal(record.get("state"))
    if not state_readable or not agrees(state, got_state):
        return CheckResult(check, "failed", f"left its objects as {record.get('state')!s:.200}")
    return CheckResult(check, "passed", f"{len(got)} steps agree")


def _step_agrees(expected: Any, got: Any) -> bool:
    if type(got) is not tuple or not got or type(expected) is not tuple:
        return False
    if expected == ("returned",):  # the original returned a value nothing describes: returning is all it shows
        return got[0] == "returned"
    return len(got) == len(expected) and got[0] == expected[0] and agrees(expected[1], got[1])


def _shown(outcome: Any) -> str:
    if type(outcome) is tuple and len(outcome) == 2 and outcome[0] == "raised":
        return f"raised {outcome[1]!s:.60}"
    if type(outcome) is tuple and len(outcome) == 2:
        return f"returned {outcome[1]!s:.200}"
    return "returned a value"


def _state_agrees(expected_text: str, got_text: object) -> bool:
    """Every attribute the original's receiver held after the call, the replay's holds alike; an attribute the
    original did not have (a cache an honest rewrite keeps, say) is no disagreement."""
    _, expected = _literal(expected_text)
    readable, got = _literal(got_text)
    if type(expected) is not dict or not readable or type(got) is not dict:
        return False
    return all(name in got and agrees(value, got[name]) for name, value in expected.items())


@dataclass(frozen=True)
class JudgedChecks:
    """Every check's verdict, and the calls whose reports were forged: a call with more than one frame, or whose
    channel carried more than its one record or another call's (such a grading earns 0)."""

    results: list[CheckResult]
    forged: list[int]


def judge_all(checks: list[IoCheck], frames: list[dict[str, Any]]) -> JudgedChecks:
    """Each check's verdict from the check child's frames, one a call, each holding the lines its call's own
    channel carried."""
    seen: dict[int, list[dict[str, Any]]] = {}
    forged: set[int] = set()
    for frame in frames:
        index = frame.get("i")
        if type(index) is not int or not 0 <= index < len(checks):
            continue
        seen.setdefault(index, []).append(frame)
    records: dict[int, dict[str, Any]] = {}
    for index, found in seen.items():
        record = _channel_record(index, found[0])
        if len(found) > 1 or record is False:
            forged.add(index)
        elif record is not None:
            records[index] = record
    results = [judge(check, records.get(index)) for index, check in enumerate(checks)]
    return JudgedChecks(results, sorted(forged))


def _channel_record(index: int, frame: dict[str, Any]) -> dict[str, Any] | Literal[False] | None:
    """The one record a call's channel carried (None: none, the call died or ran out of time; False: more than one,
    or one that names another call)."""
    if frame.get("timeout"):
        return {"i": index, "timeout": True}
    lines = frame.get("channel")
    if not isinstance(lines, list) or len(lines) > 1:
        return False
    if not lines:
        return None
    try:
        record = json.loads(lines[0]) if isinstance(lines[0], str) else None
    except ValueError:
        return False
    if not isinstance(record, dict) or record.get("i") != index:
        return False
    return record
