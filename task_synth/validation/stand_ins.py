"""Trivial stand-ins for a deleted unit: answers so cheap that a test they pass says nothing about a real solution."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import libcst as cst

from task_synth.candidates.deletion import Deletion, _stubbed

# Equal to everything, truthy, empty, and itself under any attribute or call: it passes any test that only compares.
_ALWAYS_EQUAL_SOURCE = Path(__file__).with_name("inside") / "always_equal.py"


_RETURN_NONE = "def _():\n    return None\n"


@dataclass(frozen=True)
class StandIn:
    """One trivial answer: its name (as a reviewer would write it) and the files as it leaves them."""

    name: str
    changed: dict[str, str]


def _statements(source: str) -> list[cst.BaseStatement]:
    """The body of the one function that `source` defines."""
    [function] = [statement for statement in cst.parse_module(source).body if isinstance(statement, cst.FunctionDef)]
    assert isinstance(function.body, cst.IndentedBlock)
    return list(function.body.body)


def _with_body(function: cst.FunctionDef, statements: list[cst.BaseStatement]) -> cst.FunctionDef:
    """`function` with its body replaced by `statements`, keeping its docstring as a stub does."""
    docstring = cast(list[cst.BaseStatement], list(_stubbed(function).body.body[:-1]))
    return function.with_changes(body=cst.IndentedBlock(body=[*docstring, *statements]))


def _first_argument(function: cst.FunctionDef, is_method: bool) -> str | None:
    """The first positional parameter, after self or cls for a method that is not static."""
    parameters = [*function.params.posonly_params, *function.params.params]
    static = any(isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod" for d in function.decorators)
    if is_method and not static:
        parameters = parameters[1:]
    return parameters[0].name.value if parameters else None


def _empty_class(klass: cst.ClassDef) -> cst.ClassDef:
    return klass.with_changes(
        bases=(),
        keywords=(),
        decorators=(),
        lpar=cst.MaybeSentinel.DEFAULT,
        rpar=cst.MaybeSentinel.DEFAULT,
        body=cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Pass()])]),
    )


def _definitions(module: cst.Module, qualname: str, kind: str) -> list:
    """Every definition of the unit, classes for a class and functions otherwise (a property and its setter share a
    name)."""
    owner, _, member = qualname.partition(".")
    wanted = cst.ClassDef if kind == "class" else cst.FunctionDef
    found = []
    for statement in module.body:
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or statement.name.value != owner:
            continue
        if kind != "method":
            found += [statement] if isinstance(statement, wanted) else []
        elif isinstance(statement, cst.ClassDef):
            found += [m for m in statement.body.body if isinstance(m, cst.FunctionDef) and m.name.value == member]
    return found


class _Replacer(cst.CSTTransformer):
    """Swaps given nodes of a tree (libcst nodes compare by identity) for their replacements."""

    def __init__(self, replacements: Mapping[cst.CSTNode, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):
        return self.replacements.get(original_node, updated_node)


# The round a repeated pytest run is in (the outcome report plugin sets it): the combined stand-in answers as that one.
ROUND_VARIABLE = "REGROW_ROUND"


def _bodies(definitions: list[tuple[cst.FunctionDef, bool]]) -> dict[str, list[str]]:
    """Per trivial answer, the body source of each (definition, is a method) (a property and its setter are two
    definitions; a group's parts are several); an `__init__` answers `return None` in every answer, as it must."""
    inits = [function.name.value == "__init__" for function, _ in definitions]
    if all(inits):
        return {"return None": [_RETURN_NONE] * len(definitions)}
    # The always-equal object first: it passes the most tests, so the later runs have the fewest left to run.
    bodies = {
        "return an always-equal object": [_ALWAYS_EQUAL_SOURCE.read_text()] * len(definitions),
        "return None": [_RETURN_NONE] * len(definitions),
    }
    arguments = [_first_argument(function, is_method) for function, is_method in definitions]
    if all(argument for argument, init in zip(arguments, inits, strict=True) if not init):
        bodies["return the first argument"] = [f"def _():\n    return {argument}\n" for argument in arguments]
    return {
        name: [_RETURN_NONE if init else body for body, init in zip(sources, inits, strict=True)]
        for name, sources in bodies.items()
    }


def _dispatch(sources: list[str]) -> str:
    """One function body that runs the `n`th source's body in round `n`."""
    lines = [
        "def _():",
        "    import os as _regrow_os",
        f"    _regrow_round = _regrow_os.environ.get({ROUND_VARIABLE!r}, '0')",
    ]
    for index, source in enumerate(sources):
        body = cst.Module(
            body=cast(list[cst.SimpleStatementLine | cst.BaseCompoundStatement], _statements(source))
        ).code
        lines.append(f"    if _regrow_round == {str(index)!r}:")
        lines += ["        " + line if line.strip() else line for line in body.splitlines()]
    return "\n".join(lines) + "\n"


def stand_ins(deletion: Deletion) -> list[StandIn]:
    """The trivial answers for the deleted unit, each written over the original files; none for a deleted module.

    A function or method gets the always-equal object, `return None` and `return <first argument>`; a class gets an
    empty class of its name. Every other file the deletion changed is put back as it was, so the stand-in's name
    imports.
    """
    found = _located(deletion)
    if found is None:
        return []
    modules, definitions = found
    if deletion.unit.kind == "class":
        return [
            _stand_in(
                deletion, modules, f"class {deletion.unit.qualname}: pass", {d: _empty_class(d) for d, _ in definitions}
            )
        ]
    return [
        _stand_in(
            deletion,
            modules,
            name,
            {f: _with_body(f, _statements(body)) for (f, _), body in zip(definitions, sources, strict=True)},
        )
        for name, sources in _bodies(definitions).items()
    ]


def combined_stand_in(deletion: Deletion) -> tuple[StandIn, list[str]] | None:
    """Every trivial answer of a function or method in one file state, answering as the `n`th in round `n` of a
    repeated run, so that one pytest process tries them all; with the answers' names in round order. None when there
    is at most one answer (a class, `__init__`, a deleted module)."""
    found = _located(deletion)
    if found is None or deletion.unit.kind == "class":
        return None
    modules, definitions = found
    bodies = _bodies(definitions)
    if len(bodies) < 2:
        return None
    per_definition = zip(*bodies.values(), strict=True)  # each definition's bodies, in answer order
    replacements = {
        f: _with_body(f, _statements(_dispatch(list(sources))))
        for (f, _), sources in zip(definitions, per_definition, strict=True)
    }
    return _stand_in(deletion, modules, "every trivial answer", replacements), list(bodies)


def _located(deletion: Deletion) -> tuple[dict[str, cst.Module], list[tuple]] | None:
    """The original module of each path the unit's parts sit in (one, unless a group spans modules) and each
    definition of the deleted unit (of each part of a group), with whether it is a method."""
    unit = deletion.unit
    if deletion.mode == "file" or unit.kind == "module":
        return None
    modules = {path: cst.parse_module(deletion.original[path]) for path in dict.fromkeys(p.path for p in unit.pieces)}
    definitions = [
        (definition, piece.kind == "method")
        for piece in unit.pieces
        for definition in _definitions(modules[piece.path], piece.qualname, piece.kind)
    ]
    return (modules, definitions) if definitions else None


def _stand_in(
    deletion: Deletion, modules: dict[str, cst.Module], name: str, replacements: Mapping[cst.CSTNode, cst.CSTNode]
) -> StandIn:
    originals = {path: deletion.original[path] for path in deletion.changed}
    answered = {path: module.visit(_Replacer(replacements)).code for path, module in modules.items()}
    return StandIn(name, {**originals, **answered})
