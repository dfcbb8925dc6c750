"""Unseen calls: calls no visible test makes, which change one argument of a recorded call a little, so that a table
of the visible answers earns nothing on them. Their expected outcomes come from running them where the solution is
applied (task_synth/validation/io_recording.py)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

from proto.call_values import MAX_PROGRAM_TEXT, MAX_RECIPE_TEXT, literal_text
from proto.python_ast import literal_value
from proto.tasks import IoCheck
from task_synth.validation.recorded_calls import Call, canonical, check_key, selected_checks

MAX_UNSEEN = 8  # checks of calls no visible test makes
MAX_PROBES = 48  # perturbed calls run to find the unseen checks among
MAX_BESIDE = 3  # second calls drawn in turn with one generator method's call
BESIDE_TAKE = 16  # items drawn from each of two generators in turn: enough for one to move the other's source
# What a perturbed call may raise for its new argument's type or the interpreter's limits rather than the unit's rules.
NOISE_EXCEPTIONS = {"TypeError", "RecursionError", "MemoryError"}
# The arguments of recorded calls (args, kwargs), or a program's steps ("steps", their text), by (module, qualname);
# a method's call also as ("receiver", args text, kwargs text, its receiver's pickle).
Arguments = dict[tuple[str, str], list[tuple[object, ...]]]
# Pickles of the states of a class's instances (task_synth/validation/inside/receiver_pool.py), by (module, class).
Receivers = dict[tuple[str, str], list[str]]


def recorded_arguments(raw: list[Any]) -> Arguments:
    """The arguments of every call (a program's steps) in a recorder's output, whatever its outcome."""
    found: Arguments = {}
    for item in raw:
        try:
            key = (item["module"], item["qualname"])
            if item.get("steps") is not None:
                found.setdefault(key, []).append(("steps", canonical(literal_value(item["steps"]))))
            else:
                args: Any = literal_value(item["args"])  # a tuple and a dict where the recorder wrote them
                kwargs: Any = literal_value(item["kwargs"])
                found.setdefault(key, []).append(plain_marks(args, kwargs) if item.get("recipes") else (args, kwargs))
                if item.get("inputs") and "." in key[1]:
                    found[key].append(("receiver", item["args"], item["kwargs"], item["inputs"]))
        except (KeyError, TypeError, ValueError, SyntaxError, MemoryError, RecursionError, AttributeError):
            continue
    return found


def perturbed_values(value: Any, depth: int = 2) -> list[object]:
    """Values of `value`'s type a small step away from it, for calls that no test makes.

    Integers move by one or two, flip sign or become 0; floats are scaled or negated; strings and bytes lose a
    character at either end, change case or gain a character; lists and tuples lose, repeat or change an element or
    are reversed; sets lose an element; dicts lose a key or change a value.
    """
    kind = type(value)
    if kind is bool:
        found: list[object] = [not value]
    elif kind is int:
        found = [value + 1, value - 1, value + 2, -value, 0]
    elif kind is float:
        found = [value * 2, value / 2, -value]
    elif kind is str:
        found = [value[1:], value[:-1], value.upper(), value.lower(), value[:1] + value, value + "a"]
        found += _empty_fields(value)
    elif kind is bytes:
        found = [value[1:], value[:-1], value + b"a"]
    elif kind in (list, tuple):
        items = list(value)
        found = [items[1:], items[:-1], items[::-1], items[:1] + items]
        if depth > 1:
            ends = sorted({0, len(items) - 1}) if items else []
            found += [
                [*items[:at], new, *items[at + 1 :]] for at in ends for new in perturbed_values(items[at], depth - 1)
            ]
        found = [kind(items) for items in found]
    elif kind is set:
        found = [value - {item} for item in sorted(value, key=canonical)[:3]]
    elif kind is dict:
        keys = list(value)
        found = [{k: v for k, v in value.items() if k != key} for key in keys[:1] + keys[-1:]]
        if keys and depth > 1:
            found += [{**value, keys[0]: changed} for changed in perturbed_values(value[keys[0]], depth - 1)]
    else:
        return []
    own = canonical(value)
    return list({canonical(item): item for item in found if canonical(item) != own}.values())


def receiver_pools(raw: list[Any]) -> Receivers:
    """The states the recorder kept of each class whose methods were deleted, each once."""
    found: Receivers = {}
    for item in raw:
        if isinstance(item, dict) and isinstance(item.get("receivers"), list):
            key = (str(item.get("module")), str(item.get("qualname")))
            found.setdefault(key, []).extend(text for text in item["receivers"] if isinstance(text, str))
    return {key: list(dict.fromkeys(texts)) for key, texts in found.items()}


def plain_marks(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Recipe arguments with each literal recipe as its value, so that a call compares equal to the visible call
    whose literal arguments it spells, whichever way each was written."""

    def mark(recipe: Any) -> object:
        return recipe[1] if recipe[0] == "lit" else recipe

    return tuple(map(mark, args)), {name: mark(recipe) for name, recipe in kwargs.items()}


def perturbed_recipes(recipe: Any, functions: list[object]) -> list[object]:
    """Recipes a small step from `recipe`: a literal's perturbed values, a range's ends moved, an iterator over a
    changed sequence, a list or tuple shortened or reversed, a function swapped for another of `functions` (the
    ones the recorded calls pass), which pairs it with a call that no test makes, and a partial with either changed."""
    kind = recipe[0]
    if kind == "lit":
        return [("lit", value) for value in perturbed_values(recipe[1])]
    if kind == "range":
        _, start, stop, step = recipe
        moved = [("range", start, new, step) for new in perturbed_values(stop)]
        return moved + [("range", new, stop, step) for new in perturbed_values(start)[:2]]
    if kind == "iter":
        return [("iter", changed) for changed in perturbed_recipes(recipe[1], functions)]
    if kind in ("list", "tuple"):
        items = recipe[1]
        shorter = {repr(changed): changed for changed in (items[1:], items[:-1], items[::-1]) if changed != items}
        return [(kind, changed) for changed in shorter.values()]
    if kind in ("code", "ref"):
        return [other for other in functions if other != recipe]
    if kind == "partial":  # another function under the same bound arguments, or one bound argument moved
        _, function, args, keywords = recipe
        swapped: list[object] = [("partial", other, args, keywords) for other in perturbed_recipes(function, functions)]
        moved = [
            ("partial", function, (*args[:index], changed, *args[index + 1 :]), keywords)
            for index, arg in enumerate(args)
            for changed in perturbed_recipes(arg, functions)[:2]
        ]
        return swapped + moved
    return []


def _function_recipes(calls: list[Call]) -> list[object]:
    """The functions the recorded calls pass as recipes, each once, in the order first seen."""
    found: dict[str, object] = {}
    for call in calls:
        if call.check.recipes and call.check.steps is None:
            args: Any = literal_value(call.check.args)
            kwargs: Any = literal_value(call.check.kwargs)
            for recipe in (*args, *kwargs.values()):
                if recipe[0] in ("code", "ref"):
                    found.setdefault(repr(recipe), recipe)
    return list(found.values())


def _empty_fields(text: str) -> list[str]:
    """`text` with an empty field between two of its separators (`a=1;b=2` -> `a=1; ;b=2`, `a=1;;b=2`), for each of
    its first two punctuation marks: the blank field a parser must skip or refuse, which no test need show."""
    marks = list(dict.fromkeys(char for char in text if not char.isalnum() and not char.isspace()))[:2]
    return [text.replace(mark, mark + gap + mark, 1) for mark in marks for gap in (" ", "")]


def perturbed_calls(
    calls: list[Call],
    recorded: Arguments,
    rng: random.Random,
    limit: int = MAX_PROBES,
    receivers: Receivers | None = None,
) -> list[IoCheck]:
    """Up to `limit` calls that change one argument of one of `calls` (of one step of a program) and equal none of
    the `recorded` calls.

    Each call's variants are drawn in an order from `rng` and the calls give one in turn, so that the unseen calls
    spread over the recorded ones.
    """
    variants = []
    functions = _function_recipes(calls)
    for call in calls:
        check = call.check
        if check.steps is not None:
            steps: Any = literal_value(check.steps)  # a tuple of steps: the recorder wrote them
            longer, same = _program_variants(steps)
            rng.shuffle(longer)
            rng.shuffle(same)
            # A call made twice reaches states no test shows (the top of a stack of two): those go first.
            mine: list[tuple[object, object]] = [("steps", changed) for changed in _alternating(longer, same)]
        else:
            args: Any = literal_value(check.args)  # a tuple and a dict: the recorder wrote them
            kwargs: Any = literal_value(check.kwargs)
            vary = (lambda recipe: perturbed_recipes(recipe, functions)) if check.recipes else perturbed_values
            mine = [(changed, kwargs) for changed in _changed_args(args, vary=vary)]
            mine += [(args, changed) for changed in _changed_kwargs(kwargs, vary=vary)]
            if check.inputs is not None and "." in check.qualname:  # the method on another state of its class
                pool = (receivers or {}).get((check.module, check.qualname.rpartition(".")[0]), [])
                mine += [("receiver", state) for state in pool if state != check.inputs]
            rng.shuffle(mine)
            mine = _with_beside(mine, _beside_calls(check, recorded, rng))
        if check.args_after is None:  # pickled arguments are not perturbed
            variants.append([(check, arguments) for arguments in mine])
    chosen: dict[tuple[str, str, str, str], IoCheck] = {}
    for check, arguments in (item for turn in itertools.zip_longest(*variants) for item in turn if item):
        probe = _probe(check, arguments)
        if len(chosen) >= limit or probe is None or check_key(probe) in chosen:
            continue
        mark: tuple[object, ...] = ("steps", canonical(arguments[1])) if arguments[0] == "steps" else arguments
        if arguments[0] == "beside":
            chosen[check_key(probe)] = probe  # no test draws two at once: never a recorded call
            continue
        if arguments[0] == "receiver":
            mark = ("receiver", check.args, check.kwargs, arguments[1])
        elif check.recipes:
            mark = plain_marks(*arguments)
        if mark not in recorded.get((check.module, check.qualname), ()):
            chosen[check_key(probe)] = probe
    return list(chosen.values())


Vary = Callable[[Any], list[object]]


def _changed_args(args: tuple, fixed: frozenset[object] = frozenset(), vary: Vary = perturbed_values) -> list[tuple]:
    return [args[:at] + (new,) + args[at + 1 :] for at, arg in enumerate(args) if at not in fixed for new in vary(arg)]


def _changed_kwargs(kwargs: dict, fixed: frozenset[object] = frozenset(), vary: Vary = perturbed_values) -> list[dict]:
    return [{**kwargs, name: new} for name, value in kwargs.items() if name not in fixed for new in vary(value)]


def _alternating(first: list, second: list) -> list:
    return [item for pair in itertools.zip_longest(first, second) for item in pair if item is not None]


def _program_variants(steps: tuple) -> tuple[list[tuple], list[tuple]]:
    """The program with a method call made twice, the second time with an argument changed (`push(1); peek()`
    becomes `push(1); push(2); peek()`, which tells the top of a stack from its bottom); and the program with one
    literal argument of one step changed (an argument that refers to an instance stays)."""
    found, longer = [], []
    for index, step in enumerate(steps):
        if step[0] == "get":
            continue
        head, (args, kwargs, refs) = step[:-3], step[-3:]
        fixed = frozenset(key for key, _ in refs)
        changed = [(new, kwargs) for new in _changed_args(args, fixed)]
        changed += [(args, new) for new in _changed_kwargs(kwargs, fixed)]
        found += [(*steps[:index], (*head, *pair, refs), *steps[index + 1 :]) for pair in changed]
        if step[0] == "call" and step[1] >= 0:
            longer += [_repeated(steps, index, (*head, *pair, refs)) for pair in changed[:2] or [(args, kwargs)]]
    return longer, found


def _repeated(steps: tuple, index: int, again: tuple) -> tuple:
    """`steps` with `again` run right after step `index`; later steps' targets and refs move to follow."""

    def moved(at: int) -> int:
        return at + 1 if at > index else at

    later = []
    for step in steps[index + 1 :]:
        if step[0] == "new":
            later.append((*step[:-1], tuple((key, moved(at)) for key, at in step[-1])))
        elif step[0] == "call":
            later.append((step[0], moved(step[1]), *step[2:-1], tuple((key, moved(at)) for key, at in step[-1])))
        else:
            later.append((step[0], moved(step[1]), step[2]))
    return (*steps[: index + 1], again, *later)


def _beside_calls(check: IoCheck, recorded: Arguments, rng: random.Random) -> list[tuple[object, object]]:
    """For a generator method: second calls on the same receiver, to draw in turn with the check's own (the method's
    other recorded arguments first, then its own perturbed): a cursor that another consumer of the object moves
    while it is suspended is behaviour that no call alone shows."""
    if check.take is None or check.inputs is None or "." not in check.qualname or check.recipes:
        return []
    args: Any = literal_value(check.args)
    kwargs: Any = literal_value(check.kwargs)
    others = [
        pair for pair in recorded.get((check.module, check.qualname), ())
        if len(pair) == 2 and type(pair[0]) is tuple and type(pair[1]) is dict and pair != (args, kwargs)
    ]  # fmt: skip
    others = list({canonical(pair): pair for pair in others}.values())
    rng.shuffle(others)
    own = [(changed, kwargs) for changed in _changed_args(args)][:2]
    found: list[tuple[object, object]] = [("beside", pair) for pair in [*others[:2], *own]]
    return found[:MAX_BESIDE]


def _with_beside(mine: list, beside: list) -> list:
    """The check's variants with its second calls spread among them: one first, then one after every three."""
    spread, rest = beside[:1], beside[1:]
    for at, variant in enumerate(mine):
        spread.append(variant)
        if at % 3 == 2 and rest:
            spread.append(rest.pop(0))
    return spread + rest


def _probe(check: IoCheck, arguments: tuple[object, object]) -> IoCheck | None:
    """The check's call with other arguments (or a program with other steps); None when they spell no literal."""
    if arguments[0] == "beside":
        beside = literal_text(arguments[1])
        if beside is None:
            return None
        return IoCheck(
            module=check.module, qualname=check.qualname, args=check.args, kwargs=check.kwargs, inputs=check.inputs,
            take=BESIDE_TAKE, beside=beside,
        )  # fmt: skip
    if arguments[0] == "receiver":
        return IoCheck(
            module=check.module, qualname=check.qualname, args=check.args, kwargs=check.kwargs, take=check.take,
            recipes=check.recipes, inputs=arguments[1],
        )  # fmt: skip
    if arguments[0] == "steps":
        steps = repr(arguments[1])  # read from a literal, so it reads back
        if len(steps) > MAX_PROGRAM_TEXT:
            return None
        return IoCheck(module=check.module, qualname=check.qualname, args="()", steps=steps, reads=check.reads)
    if check.recipes:
        args_text, kwargs_text = repr(arguments[0]), repr(arguments[1])
        if len(args_text) + len(kwargs_text) > MAX_RECIPE_TEXT:
            return None
    else:
        args_text, kwargs_text = literal_text(arguments[0]), literal_text(arguments[1])
    if args_text is None or kwargs_text is None:
        return None
    return IoCheck(
        module=check.module,
        qualname=check.qualname,
        args=args_text,
        kwargs=kwargs_text,
        inputs=check.inputs,
        take=check.take,
        recipes=check.recipes,
    )


def unseen_checks(calls: list[Call], linked: list[Call], limit: int = MAX_UNSEEN) -> list[IoCheck]:
    """Up to `limit` checks of unseen calls, each function's in turn.

    Calls whose outcome no linked call of the function has come first (a table of the visible answers with a fallback
    fails them), and returning calls before raising ones. At most half raise, and only an exception class that a
    linked call of the function raised, or that the library's own call raised while a passing test ran: the tests
    then show that the unit raises it, and an honest rewrite that raises another class on some edge case loses nothing.
    """
    shown = {(call.key[:2], call.outcome) for call in linked}
    documented = {(call.key[:2], call.check.raises) for call in linked if call.check.raises}
    ranked = sorted(calls, key=lambda call: ((call.key[:2], call.outcome) in shown, call.check.raises is not None))
    # The library's own call raised while a passing test ran: what it raises there is the unit's documented way.
    raising = [
        call
        for call in ranked
        if call.check.raises is not None and ((call.key[:2], call.check.raises) in documented or call.internal)
    ][: limit // 2]
    kept = [call for call in ranked if call.check.raises is None or any(call is other for other in raising)]
    return selected_checks(kept, limit)
