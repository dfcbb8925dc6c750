"""How a call's values travel as data: the one description that synthesis records, a grading container sends back,
and the grader compares.

A literal is its own description (`repr` reads back with `ast.literal_eval`); a bytearray is ('bytearray', bytes),
an enum member ('enum', class, name), a class ('class', qualified name), a function ('function', qualified name),
a bound method ('method', class, name), a deque ('deque', items, maxlen), an iterator over a sequence ('iterator',
what it has left to give), a defaultdict ('defaultdict', factory, items), an OrderedDict ('OrderedDict', pairs), a
Counter ('Counter', items), and any other object ('object', class, {attribute: description}), recursively, with what
it holds as a fourth part when its class derives from a builtin value (`class Row(dict)`, a namedtuple);
generators, modules and cycles have none. Exact types only: no `__eq__` or `__repr__` of the code under test takes
part. Stdlib only: this file is copied next to the programs that run in a repository's
interpreter, as `regrow_call_values.py`.
"""

import ast
import base64
import builtins
import collections
import contextlib
import enum
import functools
import importlib
import inspect
import itertools
import marshal
import math
import operator
import pickle
import signal
import types

if __name__ == "proto.call_values":  # on the host, where threads parse at once
    from proto.python_ast import literal_value as _literal_eval
else:  # shipped alone into a sandbox, where no `proto` of ours may be imported: a workspace could plant one
    _literal_eval = ast.literal_eval  # type: ignore[assignment]  # same call, no lock

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
        return text if len(text) <= MAX_TEXT and _literal_eval(text) == value else None
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
    if kind is bytearray:
        return ("bytearray", bytes(value))
    if kind is collections.deque:
        return ("deque", [_describe(item, depth + 1, seen, view, room, iterators) for item in value], value.maxlen)
    if iterators and kind in SEQUENCE_ITERATORS:  # in a receiver's state: what it has left to draw
        return ("iterator", _describe(_left_to_draw(value), depth + 1, seen, view, room, iterators))
    if kind in (list, tuple):
        return kind(_describe(item, depth + 1, seen, view, room, iterators) for item in value)
    if kind in (dict, collections.defaultdict, collections.Counter, collections.OrderedDict):
        inner = functools.partial(_describe, depth=depth + 1, seen=seen, view=view, room=room, iterators=iterators)
        if kind is collections.OrderedDict:  # its order is part of what it is
            return ("OrderedDict", [(inner(key), inner(item)) for key, item in value.items()])
        items = {inner(key): inner(item) for key, item in value.items()}
        if kind is collections.defaultdict:  # what a missing key will get is part of its state
            return ("defaultdict", inner(value.default_factory), items)
        return items if kind is dict else ("Counter", items)
    if kind is set:
        return {_describe(item, depth + 1, seen, view, room, iterators) for item in value}
    if kind is frozenset:  # no literal spells one
        return ("frozenset", {_describe(item, depth + 1, seen, view, room, iterators) for item in value})
    if isinstance(value, enum.Enum):
        return ("enum", kind.__qualname__, value.name)
    if isinstance(value, type):
        return ("class", f"{value.__module__}.{value.__qualname__}")
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
        name: _describe(item, depth + 1, seen, view, room, iterators)
        for name, item in sorted(attributes.items())
        if type(name) is str and not name.startswith("__")
    }
    if held is _NOTHING:
        return ("object", kind.__qualname__, described)
    return ("object", kind.__qualname__, described, _describe(held, depth + 1, seen, view, room, iterators))


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
        if len(text) > limit or _literal_eval(text) != description:
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


class Overtime(BaseException):
    """Raised into a call that ran past its time limit."""


def _overtime(signum, frame):
    raise Overtime


@contextlib.contextmanager
def _within(limit):
    """Raise Overtime into the block once `limit` seconds have passed."""
    previous = signal.signal(signal.SIGALRM, _overtime)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _awaited(coroutine):
    """Run a coroutine to its end on a fresh event loop of asyncio's; a library that needs another loop (trio) raises
    here, and the call gives no check."""
    import asyncio  # only where a call is async: most replays never pay for the import

    return asyncio.run(coroutine)


def drawn_text(items, end):
    """The outcome of a generator as literal text: `('generated', items, end)`, the items described as they came."""
    return f"('generated', ({''.join(f'{item}, ' for item in items)}), {end!r})"


def _iterable(value):
    try:
        iter(value)
    except TypeError:
        return False
    return True


def bases_of(error):
    """The names of the classes above an exception's: a subclass of the class a caller expects serves it too."""
    return [klass.__name__ for klass in type(error).__mro__[1:]]


def drawn(generator, take, raised=None):
    """Up to `take` items of `generator`, each described as it comes, and how it ended: 'ended', ('raised', class
    name), or None when `take` items came first; None for all of it when an item has no description. The class
    that ended it goes into `raised` (a dict) with its bases."""
    items, end = [], None
    while len(items) < take:
        text, end = _next_drawn(generator, raised)
        if end is not None:
            break
        if text is None:
            return None
        items.append(text)
    text = drawn_text(items, end)
    return text if len(text) <= MAX_DESCRIPTION else None


def _next_drawn(iterator, raised):
    """(the next item described, None), or (None, how the iterator ended)."""
    try:
        item = next(iterator)
    except StopIteration:
        return None, "ended"
    except Exception as error:
        return None, _ended_by(error, raised)
    return described_text(item), None


def drawn_in_turn(calls, take, raised=None):
    """The calls' generators drawn one item each in turn, `take` items each at most: a tuple of their `drawn`
    outcomes as literal text, or None when an item has no description. A call that raises at once ends with that
    raise at its first item, as a generator that raises when first drawn."""
    iterators, items, ends = [], [], []
    for call in calls:
        try:
            iterators.append(iter(call()))
            ends.append(None)
        except Exception as error:
            iterators.append(None)
            ends.append(_ended_by(error, raised))
        items.append([])
    while any(end is None and len(got) < take for end, got in zip(ends, items)):
        for index, iterator in enumerate(iterators):
            if ends[index] is not None or len(items[index]) >= take:
                continue
            text, ends[index] = _next_drawn(iterator, raised)
            if ends[index] is not None:
                continue
            if text is None:
                return None
            items[index].append(text)
    text = f"({''.join(drawn_text(got, end) + ', ' for got, end in zip(items, ends))})"
    return text if len(text) <= MAX_DESCRIPTION else None


def _ended_by(error, raised):
    if raised is not None:
        raised[type(error).__name__] = bases_of(error)
    return ("raised", type(error).__name__)


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


def _arguments(args_text, kwargs_text, recipes):
    """A call's (args, kwargs) from its texts, built from recipes where it has them; and their literal part, which
    the call must leave as it was (an iterator a recipe builds is there to be used up)."""
    return _built_arguments(_literal_eval(args_text), _literal_eval(kwargs_text), recipes)


def _built_arguments(args, kwargs, recipes):
    if not recipes:
        return args, kwargs, (args, kwargs)
    literal = (
        tuple(recipe[1] for recipe in args if recipe[0] == "lit"),
        {name: recipe[1] for name, recipe in kwargs.items() if recipe[0] == "lit"},
    )
    return tuple(built(recipe) for recipe in args), {name: built(recipe) for name, recipe in kwargs.items()}, literal


def replay(module, qualname, args_text, kwargs_text, inputs, limit, take=None, recipes=False, beside=None):
    """Run one recorded call anew, within `limit` seconds, and say what it gave as data: `returned` (described; with
    `kind`, its type's name, where no description stands for it), `raised` (an Exception's class name, with `bases`
    the names of the classes above it), `timeout`,
    `state` (a receiver's attributes after), `args_after` (pickled arguments after) and `changed_args` (literal
    arguments the call changed). A generator's items are drawn, `take` at most. With `recipes`, the texts hold a
    recipe per argument (see `built`). With `beside`, a second call's `(args, kwargs)` text on the same receiver, the
    two generators are drawn in turn (`drawn_in_turn`). Synthesis records with it and a grading container checks
    with it, so the two replay a call alike."""
    found, raised = {}, {}
    receiver = arguments = args = kwargs = before = literal = None
    try:
        with _within(limit):
            receiver, arguments = pickle.loads(base64.b64decode(inputs)) if inputs else (None, None)
            if arguments is not None:
                args, kwargs = arguments
            else:
                args, kwargs, literal = _arguments(args_text, kwargs_text, recipes)
            if receiver is not None:
                function = getattr(receiver, qualname.rpartition(".")[2])
            else:
                function = importlib.import_module(module)
                for part in qualname.split("."):
                    function = getattr(function, part)
            before = tuple(map(literal_text, literal)) if literal is not None else None
            if beside is not None:
                other_args, other_kwargs, _ = _built_arguments(*_literal_eval(beside), recipes)
                calls = (lambda: function(*args, **kwargs), lambda: function(*other_args, **other_kwargs))
                found["returned"] = drawn_in_turn(calls, take or 0, raised)
            else:
                found.update(_returned(function(*args, **kwargs), take, raised))
    except Overtime:
        found["timeout"] = True
    except Exception as error:
        if take:  # drawing from a generator, an eager raise looks like one at the first item
            found["returned"] = drawn_text([], ("raised", type(error).__name__))
            raised[type(error).__name__] = bases_of(error)
        else:
            found["raised"] = type(error).__name__
            found["bases"] = bases_of(error)  # a subclass serves callers too
    if raised:
        found["bases_of"] = raised
    if receiver is not None:
        found["state"] = state_text(receiver)
    if arguments is not None:
        found["args_after"] = described_text((args, kwargs))
    elif before is not None and tuple(map(literal_text, literal)) != before:
        found["changed_args"] = True
    return found


def _returned(result, take, raised):
    if inspect.iscoroutine(result):  # an async function's outcome is what awaiting it gives, as its tests see
        result = _awaited(result)
    if take is not None and _iterable(result):  # a list serves a test that draws from it as well
        returned = drawn(iter(result), take, raised)
    else:
        returned = described_text(result)
    return {"returned": returned} if returned is not None else {"returned": None, "kind": type(result).__name__}


MAX_STEPS = 24  # calls of one program of a deleted class
MAX_PROGRAM_TEXT = 16000  # characters of a program's outcomes, or of its instances' state


def _resolved(args, kwargs, refs, objects):
    """A step's arguments with the earlier results its refs name put in place."""
    args, kwargs = list(args), dict(kwargs)
    for key, index in refs:
        if type(key) is int:
            args[key] = objects[index]
        else:
            kwargs[key] = objects[index]
    return args, kwargs


# A test reaches these through an operator or a builtin, not by name: the replay does too, so an honest rewrite that
# gets `bool()` from `__len__` alone, or `in` from `__iter__`, agrees with an original that spelled them out.
_PROTOCOL = {
    "__len__": len, "__bool__": bool, "__iter__": iter, "__reversed__": reversed, "__repr__": repr, "__str__": str,
    "__abs__": abs, "__int__": int, "__float__": float, "__index__": operator.index, "__neg__": operator.neg,
    "__pos__": operator.pos, "__invert__": operator.invert, "__contains__": lambda a, b: b in a,
    "__eq__": operator.eq, "__ne__": operator.ne, "__lt__": operator.lt, "__le__": operator.le, "__gt__": operator.gt,
    "__ge__": operator.ge, "__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul,
    "__matmul__": operator.matmul, "__truediv__": operator.truediv, "__floordiv__": operator.floordiv,
    "__mod__": operator.mod, "__pow__": operator.pow, "__and__": operator.and_, "__or__": operator.or_,
    "__xor__": operator.xor, "__lshift__": operator.lshift, "__rshift__": operator.rshift,
    "__getitem__": operator.getitem, "__setitem__": operator.setitem, "__delitem__": operator.delitem,
}  # fmt: skip


def _bound(target, name):
    """What a step calls: the protocol's operator with the object first, or the attribute by name."""
    protocol = _PROTOCOL.get(name)
    return functools.partial(protocol, target) if protocol is not None else getattr(target, name)


def returned_text(result, view):
    """A step's outcome when it returned: its value described, or `('returned',)` where no description stands for
    it. The recorder and the replay both spell outcomes with these, so that they compare."""
    text = described_text(result, view)
    return "('returned',)" if text is None else f"('returned', {text})"


def raised_text(error):
    return f"('raised', {type(error).__name__!r})"


def outcomes_text(outcomes):
    """A program's step outcomes as one tuple literal."""
    return "(" + "".join(f"{outcome}, " for outcome in outcomes) + ")"


def program_step(klass, step, objects, view, raised=None):
    """Run one step of a program on `klass` and the `objects` earlier steps gave; (its result, its outcome as
    literal text: `('returned', description)`, `('returned',)` where no description stands for the value, or
    `('raised', class name)`). A raised class goes into `raised` (a dict) with its bases."""
    try:
        if step[0] == "get":
            _, target, name = step
            result = getattr(klass if target < 0 else objects[target], name)
        else:
            if step[0] == "new":
                function, (_, args, kwargs, refs) = klass, step
            else:
                _, target, name, args, kwargs, refs = step
                function = getattr(klass, name) if target < 0 else _bound(objects[target], name)
            args, kwargs = _resolved(args, kwargs, refs, objects)
            result = function(*args, **kwargs)
            if step[0] == "new":  # what a constructor gives is the instance; its outcome is that it returned
                return result, "('returned', None)"
    except Exception as error:
        if raised is not None:
            raised[type(error).__name__] = bases_of(error)
        return None, raised_text(error)
    return result, returned_text(result, view)


def program_text(klass, objects, view):
    """Literal text of each instance of `klass` among `objects` (by its index), as `view` describes it; None when
    one is not describable."""
    instances = tuple((index, item) for index, item in enumerate(objects) if type(item) is klass)
    return described_text(instances, view, MAX_PROGRAM_TEXT)


def replay_program(module, qualname, steps_text, reads, limit):
    """Run a recorded program of a deleted class anew, within `limit` seconds, and say what it gave as data:
    `returned` (each step's outcome, as a tuple literal), `state` (its instances as the attributes in `reads` show
    them at the end), `raised` (the class could not be imported) or `timeout`; `bases_of` names the bases of each
    class a step raised."""
    found, raised = {}, {}
    objects, outcomes = [], []
    try:
        with _within(limit):
            klass = importlib.import_module(module)
            for part in qualname.split("."):
                klass = getattr(klass, part)
            view = (klass, tuple(reads))
            for step in _literal_eval(steps_text)[:MAX_STEPS]:
                result, outcome = program_step(klass, step, objects, view, raised)
                objects.append(result)
                outcomes.append(outcome)
            state = program_text(klass, objects, view)
    except Overtime:
        found["timeout"] = True
    except Exception as error:
        found["raised"] = type(error).__name__
    if not found:
        text = outcomes_text(outcomes)
        found["returned"] = text if len(text) <= MAX_PROGRAM_TEXT else None
        found["state"] = state
        if raised:
            found["bases_of"] = raised
    return found
