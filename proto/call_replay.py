"""Replaying a recorded call, or a program of a deleted class, anew within a time limit, and saying what it gave as
data (proto/call_values.py's descriptions): synthesis records with it and a grading container checks with it, so the
two replay a call alike. Stdlib only: this file is copied next to the programs that run in a repository's
interpreter, as `regrow_call_replay.py`, beside `regrow_call_values.py`.
"""

import base64
import contextlib
import functools
import importlib
import inspect
import operator
import pickle
import signal

if __name__ == "proto.call_replay":  # on the host
    from proto.call_values import (
        MAX_DESCRIPTION,
        MAX_PROGRAM_TEXT,
        MAX_STEPS,
        built,
        described_text,
        drawn_text,
        literal_text,
        literal_value,
        state_text,
    )
else:  # shipped into a sandbox, where no `proto` of ours may be imported: a workspace could plant one
    from regrow_call_values import (  # type: ignore[no-redef]  # the same module, by its name there
        MAX_DESCRIPTION,
        MAX_PROGRAM_TEXT,
        MAX_STEPS,
        built,
        described_text,
        drawn_text,
        literal_text,
        literal_value,
        state_text,
    )

SHIPPED_NAME = "regrow_call_replay"


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


def _arguments(args_text, kwargs_text, recipes):
    """A call's (args, kwargs) from its texts, built from recipes where it has them; and their literal part, which
    the call must leave as it was (an iterator a recipe builds is there to be used up)."""
    return _built_arguments(literal_value(args_text), literal_value(kwargs_text), recipes)


def _built_arguments(args, kwargs, recipes):
    if not recipes:
        return args, kwargs, (args, kwargs)
    literal = (
        tuple(recipe[1] for recipe in args if recipe[0] == "lit"),
        {name: recipe[1] for name, recipe in kwargs.items() if recipe[0] == "lit"},
    )
    return tuple(built(recipe) for recipe in args), {name: built(recipe) for name, recipe in kwargs.items()}, literal


def replay(call, limit):
    """Run one recorded call anew, within `limit` seconds, and say what it gave as data: `returned` (described; with
    `kind`, its type's name, where no description stands for it), `raised` (an Exception's class name, with `bases`
    the names of the classes above it), `timeout`, `state` (a receiver's attributes after), `args_after` (pickled
    arguments after) and `changed_args` (literal arguments the call changed). `call` names the call as IoCheck's
    fields do: `module`, `qualname`, `args` and `kwargs` (texts), and where it has them `inputs` (the pickle of its
    receiver and of arguments no text spells), `take`, `recipes` and `beside`. A generator's items are drawn, `take`
    at most. With `recipes`, the texts hold a recipe per argument (see `built`). With `beside`, a second call's `(args,
    kwargs)` text on the same receiver, the two generators are drawn in turn (`drawn_in_turn`). Synthesis records
    with it and a grading container checks with it, so the two replay a call alike."""
    module, qualname, args_text, kwargs_text = call["module"], call["qualname"], call["args"], call["kwargs"]
    inputs, take, recipes = call.get("inputs"), call.get("take"), call.get("recipes") is True
    found, raised = {}, {}
    receiver = arguments = args = kwargs = before = literal = None
    try:
        with _within(limit):
            receiver, arguments = pickle.loads(base64.b64decode(inputs)) if inputs else (None, None)
            if arguments is not None:
                args, kwargs = arguments
            else:
                args, kwargs, literal = _arguments(args_text, kwargs_text, recipes)
            function = _called_function(module, qualname, receiver)
            before = tuple(map(literal_text, literal)) if literal is not None else None
            found.update(_outcome(function, (args, kwargs), call.get("beside"), recipes, take, raised))
    except Overtime:
        found["timeout"] = True
    except Exception as error:
        found.update(_raised(error, take, raised))
    if raised:
        found["bases_of"] = raised
    if receiver is not None:
        found["state"] = state_text(receiver)
    if arguments is not None:
        found["args_after"] = described_text((args, kwargs))
    elif before is not None and tuple(map(literal_text, literal)) != before:
        found["changed_args"] = True
    return found


def _called_function(module, qualname, receiver):
    """What a replay calls: the receiver's method, or the module's function (or a class's, by its qualified name)."""
    if receiver is not None:
        return getattr(receiver, qualname.rpartition(".")[2])
    function = importlib.import_module(module)
    for part in qualname.split("."):
        function = getattr(function, part)
    return function


def _outcome(function, arguments, beside, recipes, take, raised):
    """What calling `function` with `arguments` gave; with `beside`, its generator and a second call's drawn in turn."""
    args, kwargs = arguments
    if beside is None:
        return _returned(function(*args, **kwargs), take, raised)
    other_args, other_kwargs, _ = _built_arguments(*literal_value(beside), recipes)
    calls = (lambda: function(*args, **kwargs), lambda: function(*other_args, **other_kwargs))
    return {"returned": drawn_in_turn(calls, take or 0, raised)}


def _raised(error, take, raised):
    if take:  # drawing from a generator, an eager raise looks like one at the first item
        raised[type(error).__name__] = bases_of(error)
        return {"returned": drawn_text([], ("raised", type(error).__name__))}
    return {"raised": type(error).__name__, "bases": bases_of(error)}  # a subclass serves callers too


def _returned(result, take, raised):
    if inspect.iscoroutine(result):  # an async function's outcome is what awaiting it gives, as its tests see
        result = _awaited(result)
    if take is not None and _iterable(result):  # a list serves a test that draws from it as well
        returned = drawn(iter(result), take, raised)
    else:
        returned = described_text(result)
    return {"returned": returned} if returned is not None else {"returned": None, "kind": type(result).__name__}


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
            for step in literal_value(steps_text)[:MAX_STEPS]:
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
