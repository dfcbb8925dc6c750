"""How a call's values travel as data: the one description that synthesis records, a grading container sends back,
and the grader compares.

A literal is its own description (`repr` reads back with `ast.literal_eval`); a bytearray is ('bytearray', bytes),
an enum member ('enum', class, name), a class ('class', qualified name), a function ('function', qualified name),
a bound method ('method', class, name), a deque ('deque', items, maxlen), an iterator over a sequence ('iterator',
what it has left to give), a defaultdict ('defaultdict', factory, items), an OrderedDict ('OrderedDict', pairs), a
Counter ('Counter', items), and any other object ('object', class, {attribute: description}), recursively, with what
it holds as a fourth part when its class derives from a builtin value (`class Row(dict)`, a namedtuple);
generators, modules and cycles have none. Exact types only: no `__eq__` or `__repr__` of the code under test takes
part. Replaying a call anew, and describing what it gave, is proto/call_replay.py's. Stdlib only: this file is
copied next to the programs that run in a repository's interpreter, as `regrow_call_values.py`.
"""

import ast
import base64
import builtins
import collections
import enum
import functools
import importlib
import inspect
import itertools
import marshal
import math
import types

if __name__ == "proto.call_values":  # on the host, where threads parse at once
    from proto.python_ast import literal_value
else:  # shipped into a sandbox, where no `proto` of ours may be imported: a workspace could plant one
    literal_value = ast.literal_eval  # type: ignore[assignment]  # same call, no lock

MAX_TEXT = 300  # characters of a call's literal arguments
MAX_RECIPE_TEXT = 6000  # characters of a call's argument recipes (a function's code takes a few hundred)
RECIPE_KINDS = (
    "lit",
    "range",
    "iter",
    "list",
    "tuple",
    "dict",
    "module",
    "ref",
    "code",
    "signature",
    "partial",
)  # what `built` builds
MAX_DESCRIPTION = 4000  # characters of a described value
MAX_DEPTH = 6
MAX_STEPS = 24  # calls of one program of a deleted class
MAX_PROGRAM_TEXT = 16000  # characters of a program's outcomes, or of its instances' state
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
        return text if len(text) <= MAX_TEXT and literal_value(text) == value else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):  # frozenset(...) is no literal
        return None


class _Undescribable(Exception):
    """A value with a part no description stands for: a function, a generator, a cycle, too deep."""


# Iterators over a sequence, which say where they are without being drawn from (`__reduce__`); str has two kinds.
_EMPTY_SEQUENCES: tuple = ([], (), range(0), "", "\u00e9", b"")
SEQUENCE_ITERATORS = tuple({type(iter(empty)) for empty in _EMPTY_SEQUENCES})
_OPAQUE = (types.ModuleType, types.GeneratorType, types.CoroutineType, types.CodeType, types.FrameType)
_NAMED = (types.FunctionType, types.BuiltinFunctionType)


def _describe(value, depth, seen, view, room, iterators=False):
    """`value` as data. `room` ([count]) is how many more values the description may hold: each takes a character of
    its text or more (save a set's items that describe alike), so a big object is refused before it is walked whole.
    With `iterators` (a receiver's state), an iterator over a sequence is what it has left to give; a returned one
    has no description, so that a rewrite may return a generator where the original returned `iter(list)`."""
    room[0] -= 1
    if room[0] < 0:
        raise _Undescribable
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
    if view is not None and kind is view[0]:
        return ("instance", kind.__qualname__, _public(value, depth, seen, view, room))
    inner = functools.partial(_describe, depth=depth + 1, seen=seen, view=view, room=room, iterators=iterators)
    described = _described_builtin(value, kind, inner, iterators)
    if described is not _NOTHING:
        return described
    if isinstance(value, enum.Enum):
        return ("enum", kind.__qualname__, value.name)
    if isinstance(value, type):
        return ("class", f"{value.__module__}.{value.__qualname__}")
    return _described_object(value, kind, inner)


def _described_builtin(value, kind, inner, iterators):
    """A value of one of the interpreter's own containers, its parts described by `inner`; _NOTHING for another."""
    if kind is bytearray:
        return ("bytearray", bytes(value))
    if kind is collections.deque:
        return ("deque", [inner(item) for item in value], value.maxlen)
    if iterators and kind in SEQUENCE_ITERATORS:  # in a receiver's state: what it has left to draw
        return ("iterator", inner(_left_to_draw(value)))
    if kind in (list, tuple):
        return kind(inner(item) for item in value)
    if kind in (dict, collections.defaultdict, collections.Counter, collections.OrderedDict):
        return _described_mapping(value, kind, inner)
    if kind is set:
        return {inner(item) for item in value}
    if kind is frozenset:  # no literal spells one
        return ("frozenset", {inner(item) for item in value})
    return _NOTHING


def _described_mapping(value, kind, inner):
    if kind is collections.OrderedDict:  # its order is part of what it is
        return ("OrderedDict", [(inner(key), inner(item)) for key, item in value.items()])
    items = {inner(key): inner(item) for key, item in value.items()}
    if kind is collections.defaultdict:  # what a missing key will get is part of its state
        return ("defaultdict", inner(value.default_factory), items)
    return items if kind is dict else ("Counter", items)


def _described_object(value, kind, inner):
    """Any other object: its class and attributes (`__dict__` and slots), with what it holds as a builtin value's
    subclass or in an interpreter-made class's layout."""
    held = _builtin_part(value)
    if held is _NOTHING:
        held = _native_part(kind, value)
    attributes = getattr(value, "__dict__", None)
    slots = [name for klass in kind.__mro__ for name in _slot_names(klass)]
    if type(attributes) is not dict and not slots and held is _NOTHING:
        raise _Undescribable
    attributes = dict(attributes) if type(attributes) is dict else {}
    attributes.update((name, getattr(value, name)) for name in slots if hasattr(value, name))
    described = {
        name: inner(item)
        for name, item in sorted(attributes.items())
        if type(name) is str and not name.startswith("__")
    }
    if held is _NOTHING:
        return ("object", kind.__qualname__, described)
    return ("object", kind.__qualname__, described, inner(held))


_NOTHING = object()


def _slot_names(klass):
    """The attribute names of a class's own slots, mangled as the class statement mangles `__name`; a subclass
    with a `__dict__` still keeps its bases' slots, which the dict does not hold."""
    slots = klass.__dict__.get("__slots__", ())
    for name in (slots,) if isinstance(slots, str) else slots:
        if name in ("__dict__", "__weakref__"):
            continue
        private = name.startswith("__") and not name.endswith("__")
        yield f"_{klass.__name__.lstrip('_')}{name}" if private else name


# How to read what a subclass of a builtin value holds past any method it overrides: a `class Row(dict)` or a
# namedtuple is its items as much as its attributes, and a description of its attributes alone fits every instance.
_BUILTIN_PARTS = (
    (dict, lambda value: dict(dict.items(value))),
    (list, lambda value: list(list.__iter__(value))),
    (tuple, lambda value: tuple(tuple.__iter__(value))),
    (set, lambda value: set(set.__iter__(value))),
    (frozenset, lambda value: frozenset(frozenset.__iter__(value))),
    (str, str.__str__),
    (bytes, lambda value: bytes(memoryview(value))),
    (int, int.__index__),
    (float, float.__float__),
)


def _builtin_part(value):
    """A plain copy of what an instance of a builtin type's subclass holds; _NOTHING for any other object."""
    for base, part in _BUILTIN_PARTS:
        if isinstance(value, base):
            return part(value)
    return _NOTHING


# Py_TPFLAGS_IMMUTABLETYPE: set on the interpreter's own classes (static, or made in C like functools.partial), never
# on one a class statement made.
_INTERPRETER_MADE = 1 << 8


def _native_part(kind, value):
    """What an object holds in the layout of an interpreter-made class of its own (a datetime subclass's fields, an
    exception's args, a partial's function and arguments), as that class's own reduction gives it; _NOTHING when no
    such class holds data. One that holds data and has no reduction of its own leaves the value with no description,
    as does an iterator: a rewrite may return a generator for it."""
    if hasattr(kind, "__next__"):
        raise _Undescribable
    native = [k for k in kind.__mro__ if k.__flags__ & _INTERPRETER_MADE and k.__basicsize__ > object.__basicsize__]
    for klass in native:
        own = klass.__dict__
        try:
            if "__reduce_ex__" in own:
                return _reduced_parts(own["__reduce_ex__"](value, 4))
            if "__reduce__" in own:
                return _reduced_parts(own["__reduce__"](value))
        except Exception as error:  # a base that will not say what it holds
            raise _Undescribable from error
    if native:
        raise _Undescribable
    return _NOTHING


def _reduced_parts(reduced):
    """A reduction's arguments, state, and the items and pairs it hands over as iterators (a deque's), as data."""
    parts = list(reduced[1:5])
    for index in (2, 3):
        if index < len(parts) and parts[index] is not None:
            parts[index] = list(itertools.islice(parts[index], MAX_DESCRIPTION + 1))
    return tuple(parts)


def _left_to_draw(iterator):
    """The items an iterator over a sequence has yet to give, read from its `__reduce__` without drawing: a range's
    as a range."""
    reduced = iterator.__reduce__()  # (iter, (sequence,), position), or (iter, ((),)) once used up
    sequence, position = reduced[1][0], reduced[2] if len(reduced) > 2 else 0
    if type(sequence) is range:
        return ("range", sequence.start + position * sequence.step, sequence.stop, sequence.step)
    if len(sequence) - position > MAX_DESCRIPTION:
        raise _Undescribable
    return tuple(sequence[position:])


def _public(value, depth, seen, view, room):
    """An instance of a deleted class as the visible tests see it: the attributes they read (methods aside), each
    described; the rest of its layout is the implementation's own."""
    klass, names = view
    found = {}
    for name in names:
        if isinstance(inspect.getattr_static(klass, name, None), (types.FunctionType, classmethod, staticmethod)):
            continue
        try:
            item = getattr(value, name)
        except Exception:  # the attribute is missing, or a property raised: either way it has no value to show
            continue
        found[name] = _describe(item, depth + 1, seen, view, room)
    return found


def described_text(value, view=None, limit=MAX_DESCRIPTION):
    """Literal text that stands for `value`, objects included (their class and attributes, recursively); None when
    some part is not describable or the text is longer than `limit`. For a literal it is `repr(value)`. With `view`
    (a class and attribute names), that class's instances are described by those attributes only."""
    try:
        description = _describe(value, 0, frozenset(), view, [limit])
        text = repr(description)
        if len(text) > limit or literal_value(text) != description:
            return None
    except (_Undescribable, TypeError, ValueError, SyntaxError, RecursionError, MemoryError):
        return None
    return text


def state_text(receiver):
    """The receiver's attributes (`__dict__` or slots), described, as dict literal text; None when they are not
    describable. A receiver of a builtin type's subclass holds its items under `__held__`, which no attribute of a
    description is named."""
    try:
        description = _describe(receiver, 0, frozenset(), None, [MAX_DESCRIPTION], iterators=True)
    except (_Undescribable, TypeError, ValueError, RecursionError, MemoryError):
        return None
    if type(description) is not tuple or description[0] != "object":
        return None
    attributes = description[2] if len(description) == 3 else {**description[2], "__held__": description[3]}
    text = repr(attributes)
    return text if len(text) <= MAX_DESCRIPTION else None


def drawn_text(items, end):
    """The outcome of a generator as literal text: `('generated', items, end)`, the items described as they came."""
    return f"('generated', ({''.join(f'{item}, ' for item in items)}), {end!r})"


def built(recipe):
    """The value an argument recipe stands for, made anew: `('lit', value)`, `('range', start, stop, step)`,
    `('iter', recipe)`, `('list' | 'tuple', recipes)`, `('dict', ((key, value) recipes))`, `('module', name)`,
    `('ref', module, qualname)` (an object found by its name), `('code', module, qualname, marshalled code,
    default recipes, keyword default recipes, closure recipes, ((global name, recipe), ...))`: a function by value,
    as the lambdas and helpers a test passes are, or `('signature', ((name, kind, default, annotation), ...), return
    annotation)`: an inspect.Signature, None standing for an empty default or annotation, or `('partial', function
    recipe, argument recipes, ((keyword, recipe), ...))`: a functools.partial."""
    kind = recipe[0]
    if kind == "lit":
        return recipe[1]
    if kind == "range":
        return range(*recipe[1:])
    if kind == "iter":
        return iter(built(recipe[1]))
    if kind in ("list", "tuple"):
        return (list if kind == "list" else tuple)(built(item) for item in recipe[1])
    if kind == "dict":
        return {built(key): built(value) for key, value in recipe[1]}
    if kind == "module":
        return importlib.import_module(recipe[1])
    if kind == "ref":
        found = importlib.import_module(recipe[1])
        for part in recipe[2].split("."):
            found = getattr(found, part)
        return found
    if kind == "code":
        return _function(*recipe[1:])
    if kind == "signature":
        return _signature(*recipe[1:])
    if kind == "partial":
        _, func, args, keywords = recipe
        return functools.partial(built(func), *map(built, args), **{name: built(item) for name, item in keywords})
    raise ValueError(f"no argument recipe of kind {kind!r}")


def _signature(parameters, returns):
    def value(recipe):
        return inspect.Parameter.empty if recipe is None else built(recipe)

    return inspect.Signature(
        [inspect.Parameter(name, inspect._ParameterKind(kind), default=value(default), annotation=value(annotation))
         for name, kind, default, annotation in parameters],
        return_annotation=value(returns),
    )  # fmt: skip


def _function(module, qualname, code, defaults, keyword_defaults, closure, names):
    namespace = {"__name__": module, "__builtins__": builtins}
    namespace.update((name, built(item)) for name, item in names)
    function = types.FunctionType(
        marshal.loads(base64.b64decode(code)),
        namespace,
        qualname.rpartition(".")[2],
        None if defaults is None else tuple(built(item) for item in defaults),
        tuple(types.CellType(built(item)) for item in closure) or None,
    )
    function.__qualname__ = qualname
    if keyword_defaults is not None:
        function.__kwdefaults__ = {name: built(item) for name, item in keyword_defaults}
    return function
