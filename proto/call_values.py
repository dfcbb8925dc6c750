"""How a call's values travel as data: the one description that synthesis records, a grading container sends back,
and the grader compares.

A literal is its own description (`repr` reads back with `ast.literal_eval`); a bytearray is ('bytearray', bytes),
an enum member ('enum', class, name), a class ('class', qualified name), a function ('function', qualified name),
a bound method ('method', class, name) and any other object ('object', class, {attribute: description}),
recursively; generators, modules and cycles have none. Exact types only: no `__eq__` or `__repr__` of the code
under test takes part. Stdlib only: this file is copied next to the programs that run in a repository's
interpreter, as `regrow_call_values.py`.
"""

import ast
import base64
import enum
import importlib
import math
import pickle
import signal
import types

MAX_TEXT = 300  # characters of a call's literal arguments
MAX_DESCRIPTION = 4000  # characters of a described value
MAX_DEPTH = 6
SHIPPED_NAME = "regrow_call_values"


def is_plain(value):
    """Whether `value` holds only exact literal types, in few enough nodes that its repr can stay short."""
    stack, nodes = [value], 0
    while stack:
        item = stack.pop()
        nodes += 1
        kind = type(item)
        if nodes > MAX_TEXT:
            return False
        if kind is int:
            if item.bit_length() > 1000:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif kind in (str, bytes, tuple, list, set, frozenset, dict):
            if len(item) > MAX_TEXT:
                return False
            if kind is dict:
                stack.extend(item.keys())
                stack.extend(item.values())
            elif kind not in (str, bytes):
                stack.extend(item)
        elif item is not None and kind is not bool:
            return False
    return True


def literal_text(value):
    """`repr(value)` when it is short and `ast.literal_eval` reads it back equal; else None."""
    if not is_plain(value):
        return None
    text = repr(value)
    try:
        return text if len(text) <= MAX_TEXT and ast.literal_eval(text) == value else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):  # frozenset(...) is no literal
        return None


class _Undescribable(Exception):
    """A value with a part no description stands for: a function, a generator, a cycle, too deep."""


_OPAQUE = (types.ModuleType, types.GeneratorType, types.CoroutineType, types.CodeType, types.FrameType)
_NAMED = (types.FunctionType, types.BuiltinFunctionType)


def _describe(value, depth, seen):
    kind = type(value)
    if value is None or kind in (bool, int, str, bytes, complex):
        return value
    if kind is float:
        return value if math.isfinite(value) else ("float", repr(value))
    if isinstance(value, _NAMED):  # a function held as data (a table of readers, a callback) is its name
        return ("function", f"{getattr(value, '__module__', '')}.{value.__qualname__}")
    if isinstance(value, types.MethodType):
        return ("method", type(value.__self__).__qualname__, value.__func__.__qualname__)
    if depth > MAX_DEPTH or isinstance(value, _OPAQUE) or id(value) in seen:
        raise _Undescribable
    seen = seen | {id(value)}
    if kind is bytearray:
        return ("bytearray", bytes(value))
    if kind in (list, tuple):
        return kind(_describe(item, depth + 1, seen) for item in value)
    if kind is dict:
        return {_describe(key, depth + 1, seen): _describe(item, depth + 1, seen) for key, item in value.items()}
    if kind is set:
        return {_describe(item, depth + 1, seen) for item in value}
    if kind is frozenset:  # no literal spells one
        return ("frozenset", {_describe(item, depth + 1, seen) for item in value})
    if isinstance(value, enum.Enum):
        return ("enum", kind.__qualname__, value.name)
    if isinstance(value, type):
        return ("class", f"{value.__module__}.{value.__qualname__}")
    attributes = getattr(value, "__dict__", None)
    if type(attributes) is not dict:
        slots = [name for klass in kind.__mro__ for name in getattr(klass, "__slots__", ())]
        if not slots:
            raise _Undescribable
        attributes = {name: getattr(value, name) for name in slots if hasattr(value, name)}
    described = {
        name: _describe(item, depth + 1, seen)
        for name, item in sorted(attributes.items())
        if type(name) is str and not name.startswith("__")
    }
    return ("object", kind.__qualname__, described)


def described_text(value):
    """Literal text that stands for `value`, objects included (their class and attributes, recursively); None when
    some part is not describable or the text is too long. For a literal it is `repr(value)`."""
    try:
        description = _describe(value, 0, frozenset())
        text = repr(description)
        if len(text) > MAX_DESCRIPTION or ast.literal_eval(text) != description:
            return None
    except (_Undescribable, TypeError, ValueError, SyntaxError, RecursionError, MemoryError):
        return None
    return text


def state_text(receiver):
    """The receiver's attributes (`__dict__` or slots), described, as dict literal text; None when they are not
    describable."""
    try:
        description = _describe(receiver, 0, frozenset())
    except (_Undescribable, TypeError, ValueError, RecursionError, MemoryError):
        return None
    if type(description) is not tuple or description[0] != "object":
        return None
    text = repr(description[2])
    return text if len(text) <= MAX_DESCRIPTION else None


class Overtime(BaseException):
    """Raised into a call that ran past its time limit."""


def _overtime(signum, frame):
    raise Overtime


def replay(module, qualname, args_text, kwargs_text, inputs, limit):
    """Run one recorded call anew, within `limit` seconds, and say what it gave as data: `returned` (described; with
    `kind`, its type's name, where no description stands for it), `raised` (an Exception's class name), `timeout`,
    `state` (a receiver's attributes after), `args_after` (pickled arguments after) and `changed_args` (literal
    arguments the call changed). Synthesis records with it and a grading container checks with it, so the two replay
    a call alike."""
    found = {}
    receiver = arguments = args = kwargs = before = None
    previous = signal.signal(signal.SIGALRM, _overtime)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        receiver, arguments = pickle.loads(base64.b64decode(inputs)) if inputs else (None, None)
        args, kwargs = (
            arguments if arguments is not None else (ast.literal_eval(args_text), ast.literal_eval(kwargs_text))
        )
        if receiver is not None:
            function = getattr(receiver, qualname.rpartition(".")[2])
        else:
            function = importlib.import_module(module)
            for part in qualname.split("."):
                function = getattr(function, part)
        before = (literal_text(args), literal_text(kwargs))
        result = function(*args, **kwargs)
        found["returned"] = described_text(result)
        if found["returned"] is None:
            found["kind"] = type(result).__name__
    except Overtime:
        found["timeout"] = True
    except Exception as error:
        found["raised"] = type(error).__name__
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if receiver is not None:
        found["state"] = state_text(receiver)
    if arguments is not None:
        found["args_after"] = described_text((args, kwargs))
    elif before is not None and (literal_text(args), literal_text(kwargs)) != before:
        found["changed_args"] = True
    return found
