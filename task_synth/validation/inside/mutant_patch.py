"""Putting a mutant in place in an interpreter that has already imported the package, for the mutant's forked child.

A mutant that changes only function bodies is patched in: each changed function's live object gets the mutant's code
(`__code__`), so that every reference to it (an alias, a from-import elsewhere, a decorator's wrapper, a registry)
runs the mutant, with nothing imported again. A mutant that changes what runs at import (a module or class body, a
default, a decorator's arguments), or whose function has no live object, is imported instead: the package's modules
are dropped and the mutant's text is served in place of its file. Shipped beside the call runner as
`regrow_mutant_patch`. Stdlib only: it runs in the repository's interpreter.
"""

import importlib.util
import inspect
import os
import sys
import types

_FUNCTION = inspect.CO_OPTIMIZED | inspect.CO_NEWLOCALS  # a class body's code has neither


class MutantFinder:
    """Serves one module from the given source text instead of its file: a mutant, without writing the workspace
    (which the sandbox's user may not write) and without stale bytecode."""

    def __init__(self, name, path, source):
        self.name, self.path, self.source = name, path, source

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        package = os.path.basename(self.path) == "__init__.py"
        locations = [os.path.dirname(self.path)] if package else None
        return importlib.util.spec_from_file_location(
            fullname, self.path, loader=self, submodule_search_locations=locations
        )

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.source, self.path, "exec"), module.__dict__)


def _nested(code):
    return [const for const in code.co_consts if isinstance(const, types.CodeType)]


def _own(code):
    """What a code object holds besides the code nested in it (line numbers aside)."""
    consts = tuple(("<code>",) if isinstance(c, types.CodeType) else (type(c).__name__, c) for c in code.co_consts)
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_flags)


def _differs(original, mutant):
    if _own(original) != _own(mutant):
        return True
    inner, changed = _nested(original), _nested(mutant)
    return len(inner) != len(changed) or any(_differs(o, m) for o, m in zip(inner, changed))


def changed_functions(original, mutant):
    """[(original code, mutant code)] of the outermost functions the mutant changed, or None when it changed code that
    runs at import: the module's or a class body's own code, or what is nested where."""
    if _own(original) != _own(mutant):
        return None
    inner, changed = _nested(original), _nested(mutant)
    if len(inner) != len(changed):
        return None
    found = []
    for o, m in zip(inner, changed):
        if o.co_flags & _FUNCTION == _FUNCTION:
            if _differs(o, m):
                found.append((o, m))
            continue
        below = changed_functions(o, m)  # a class body
        if below is None:
            return None
        found.extend(below)
    return found


def _inside(value, module_name):
    """The objects a value holds functions in: a method's function, a property's accessors, a class's members (of a
    class the module defines), what a decorator wrapped."""
    if isinstance(value, (staticmethod, classmethod)):
        return [value.__func__]
    if isinstance(value, property):
        return [value.fget, value.fset, value.fdel]
    if isinstance(value, type):
        return list(vars(value).values()) if value.__module__ == module_name else []
    held = []
    for name in ("__wrapped__", "func"):
        try:
            held.append(inspect.getattr_static(value, name))
        except AttributeError:
            pass
    return [inner for inner in held if isinstance(inner, (types.FunctionType, staticmethod, classmethod, property))]


def live_functions(module):
    """Every function object the module's namespace reaches: its functions, its classes' methods (static, class,
    properties'), and what decorators wrapped (`__wrapped__`, a cached property's `func`)."""
    seen, found = set(), []
    pending = [(value, 0) for value in list(vars(module).values())]
    while pending:
        value, depth = pending.pop()
        if value is None or id(value) in seen or depth > 8 or isinstance(value, types.ModuleType):
            continue
        seen.add(id(value))
        if isinstance(value, types.FunctionType):
            found.append(value)
        pending.extend((inner, depth + 1) for inner in _inside(value, module.__name__))
    return found


def _patched(module, path, source):
    """Patch the mutant's changed functions into the imported `module`; False (nothing patched) when it cannot."""
    try:
        with open(path, encoding="utf-8") as handle:
            original = compile(handle.read(), path, "exec")
        changes = changed_functions(original, compile(source, path, "exec"))
    except (OSError, SyntaxError, ValueError):
        return False
    if changes is None:
        return False
    live = live_functions(module)
    patches = []
    for before, after in changes:
        targets = [
            function
            for function in live
            if (function.__code__.co_name, function.__code__.co_firstlineno) == (before.co_name, before.co_firstlineno)
            and function.__code__.co_filename == before.co_filename
        ]
        if not targets or any(function.__code__.co_freevars != after.co_freevars for function in targets):
            return False
        patches.extend((function, after) for function in targets)
    for function, after in patches:
        function.__code__ = after
    return True


def put_in_place(mutant):
    """Make `mutant` (`{"module", "path", "source"}`) what this interpreter runs: patched into its imported module,
    or else served in place of its file, the package's modules dropped so that the next import takes it."""
    name = mutant["module"]
    module = sys.modules.get(name)
    if module is not None and _patched(module, mutant["path"], mutant["source"]):
        return
    top = name.split(".")[0]
    for loaded in [key for key in sys.modules if key == top or key.startswith(top + ".")]:
        del sys.modules[loaded]
    sys.meta_path.insert(0, MutantFinder(name, mutant["path"], mutant["source"]))
