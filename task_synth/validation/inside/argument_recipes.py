"""Argument recipes: literal data that a replay builds a call's arguments from (proto.call_values.built), for the
arguments that no literal spells and a check still needs to vary: a range, an iterator over a literal sequence, a
module, an object by its importable name (a builtin, a library function, a class), a function by value (its code,
defaults, closure and the globals it reads: the lambdas and helpers a test passes), a function's signature, and
lists, tuples and dicts of them. Unlike a pickle, a recipe is data the host can read and change: unseen calls swap
one function for another.

Shipped beside the recorder plugin as `regrow_argument_recipes`. Stdlib only: it runs in the repository's
interpreter, whose marshal format the grading container shares (the same image).
"""

import ast
import base64
import functools
import inspect
import marshal
import sys
import sysconfig
import types

try:  # in a sandbox the values module is copied beside this one; in regrow it is proto's
    from regrow_call_values import MAX_RECIPE_TEXT, SEQUENCE_ITERATORS, literal_text
except ImportError:
    from proto.call_values import MAX_RECIPE_TEXT, SEQUENCE_ITERATORS, literal_text

MAX_DEPTH = 4  # a function's globals' own globals, and so on
MAX_ROOM = 200  # values in one call's recipes
_STDLIB = sysconfig.get_paths()["stdlib"]


class Unbuildable(Exception):
    """An argument that no recipe stands for: a generator, an open file, an object of the test's own class."""


def recipe_texts(args, kwargs, library_files):
    """(args, kwargs) as recipe literal texts, a recipe per argument; None when one has none or they are long.
    `library_files` are the package's own files: their modules are importable in any container of the task, where
    a test module need not be."""
    room = [MAX_ROOM]
    try:
        texts = (
            repr(tuple(_recipe(value, 0, room, library_files) for value in args)),
            repr({name: _recipe(value, 0, room, library_files) for name, value in kwargs.items()}),
        )
    except (Unbuildable, RecursionError, ValueError, TypeError, AttributeError):
        return None
    return texts if sum(map(len, texts)) <= MAX_RECIPE_TEXT else None


def function_recipe(function, library_files):
    """The recipe of a function that no module holds by its name (a test's lambda, a library's own `lambda x:
    True`), which a pickle of an object holding it can carry; None for a function pickle finds by its name, or one
    that no recipe stands for."""
    if _by_name(function, library_files) is not None:
        return None
    try:
        return _by_value(function, 0, [MAX_ROOM], library_files)
    except (Unbuildable, RecursionError, ValueError, TypeError, AttributeError):
        return None


def unchanged_literals(args, kwargs, args_text, kwargs_text):
    """Whether the arguments whose recipe is a literal are still that literal after the call."""
    recipes, keyword_recipes = ast.literal_eval(args_text), ast.literal_eval(kwargs_text)
    pairs = [*zip(args, recipes), *((kwargs.get(name), recipe) for name, recipe in keyword_recipes.items())]
    return all(literal_text(value) == literal_text(recipe[1]) for value, recipe in pairs if recipe[0] == "lit")


def _recipe(value, depth, room, library_files):
    room[0] -= 1
    if room[0] < 0 or depth > MAX_DEPTH:
        raise Unbuildable
    if literal_text(value) is not None:
        return ("lit", value)
    kind = type(value)
    if kind is range:
        return ("range", value.start, value.stop, value.step)

    def recipe(item):
        return _recipe(item, depth + 1, room, library_files)

    held = _container_recipe(value, kind, recipe)
    if held is not None:
        return held
    if kind is inspect.Signature:
        return _signature(value, depth, room, library_files)
    if kind is types.ModuleType:
        if not _importable(value, library_files):
            raise Unbuildable
        return ("module", value.__name__)
    named = _by_name(value, library_files)
    if named is not None:
        return named
    if kind is types.FunctionType:
        return _by_value(value, depth, room, library_files)
    raise Unbuildable


def _container_recipe(value, kind, recipe):
    """The recipe of an iterator over a sequence, a list, tuple or dict, or a functools.partial, with `recipe` making
    its parts'; None for a value of another kind."""
    if kind in SEQUENCE_ITERATORS:
        reduced = value.__reduce__()  # (iter, (sequence,), position): read without drawing from it
        if len(reduced) < 3 or reduced[2] != 0:
            raise Unbuildable
        return ("iter", recipe(reduced[1][0]))
    if kind in (list, tuple):
        return (kind.__name__, tuple(recipe(item) for item in value))
    if kind is dict:
        return ("dict", tuple((recipe(k), recipe(v)) for k, v in value.items()))
    if kind is functools.partial:
        keywords = tuple((name, recipe(item)) for name, item in value.keywords.items())
        return ("partial", recipe(value.func), tuple(map(recipe, value.args)), keywords)
    return None


def _signature(signature, depth, room, library_files):
    """('signature', ((name, kind, default recipe or None, annotation recipe or None), ...), return annotation recipe
    or None): what `inspect.signature` gave, which toolz's arity checks take as an argument. None stands for empty."""

    def recipe(value):
        return None if value is inspect.Parameter.empty else _recipe(value, depth + 1, room, library_files)

    parameters = tuple(
        (p.name, int(p.kind), recipe(p.default), recipe(p.annotation)) for p in signature.parameters.values()
    )
    return ("signature", parameters, recipe(signature.return_annotation))


def _importable(module, library_files):
    """Whether a module is found by its name in every container of the task: the package's, the standard
    library's and installed ones, not a test module."""
    path = getattr(module, "__file__", None)
    if path is None:
        return module.__name__ in sys.builtin_module_names
    return path in library_files or path.startswith(_STDLIB) or "-packages" in path


def _by_name(value, library_files):
    """('ref', module, qualname) for an object its module holds under its qualified name; else None."""
    owner = getattr(value, "__objclass__", value)  # a method of a builtin type: `str.upper`
    module_name, qualname = getattr(owner, "__module__", None), getattr(value, "__qualname__", None)
    if type(module_name) is not str or type(qualname) is not str or "<" in qualname:
        return None
    module = sys.modules.get(module_name)
    if module is None or not _importable(module, library_files):
        return None
    found = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return ("ref", module_name, qualname) if found is value else None


def _by_value(function, depth, room, library_files):
    """A function as its code and what it reads: a lambda, or a helper defined in a test module."""
    code = function.__code__

    def recipe(value):
        return _recipe(value, depth + 1, room, library_files)

    closure = tuple(recipe(cell.cell_contents) for cell in function.__closure__ or ())  # an empty cell: ValueError
    names = tuple(
        (name, recipe(function.__globals__[name]))
        for name in sorted(_global_names(code))
        if name in function.__globals__
    )
    defaults = None if function.__defaults__ is None else tuple(map(recipe, function.__defaults__))
    keyword = function.__kwdefaults__
    keyword_defaults = (
        None if keyword is None else tuple((name, recipe(item)) for name, item in sorted(keyword.items()))
    )
    marshalled = base64.b64encode(marshal.dumps(code)).decode()
    return ("code", function.__module__, function.__qualname__, marshalled, defaults, keyword_defaults, closure, names)


def _global_names(code):
    """The names a code object and the code nested in it may read as globals."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _global_names(constant)
    return names
