"""The three deletion modes: `stub` a body, `remove` a definition, or delete a whole module (`file`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from task_synth.candidates.import_fixups import fix_imports
from task_synth.candidates.units import Unit
from task_synth.repository.repo_layout import RepoLayout

MODE_KINDS = {
    "stub": ("function", "method", "class", "feature", "group"),
    "remove": ("function", "method", "class", "feature", "group"),
    "file": ("module",),
}


class DeletionError(ValueError):
    """A unit that this mode cannot delete."""


@dataclass(frozen=True)
class Deletion:
    """The files one deletion changes: new text per path, None when the file is gone, and the originals."""

    unit: Unit
    mode: str
    changed: Mapping[str, str | None]
    original: dict[str, str]


def _raise_not_implemented() -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine([cst.Raise(exc=cst.Name("NotImplementedError"))])


def _stubbed(function: cst.FunctionDef) -> cst.FunctionDef:
    body = function.body
    kept: list[cst.BaseStatement] = []
    if isinstance(body, cst.IndentedBlock) and body.body:
        first = body.body[0]
        if (
            isinstance(first, cst.SimpleStatementLine)
            and isinstance(first.body[0], cst.Expr)
            and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        ):
            kept.append(first)
    return function.with_changes(body=cst.IndentedBlock(body=[*kept, _raise_not_implemented()]))


def _stub_class(klass: cst.ClassDef) -> cst.ClassDef:
    members = [_stubbed(member) if isinstance(member, cst.FunctionDef) else member for member in klass.body.body]
    return klass.with_changes(body=klass.body.with_changes(body=members))


def _edit_top_level(module: cst.Module, unit: Unit, mode: str) -> tuple[cst.Module, set[str]]:
    """Apply `mode` to the unit's definitions; returns the new module and the top-level names it removed."""
    owner, _, member = unit.qualname.partition(".")
    helpers = set(unit.helpers)
    removed: set[str] = set()
    found = False
    body: list[cst.BaseStatement] = []
    for statement in module.body:
        name = statement.name.value if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) else None
        if name in helpers:
            removed.add(name)
            continue
        if name != owner:
            body.append(statement)
            continue
        found = True
        if unit.kind == "method":
            statement = _edit_method(statement, member, mode)
        elif mode == "remove":
            removed.add(name)
            continue
        elif isinstance(statement, cst.ClassDef):
            statement = _stub_class(statement)
        elif isinstance(statement, cst.FunctionDef):  # the only other kind that has a name
            statement = _stubbed(statement)
        body.append(statement)
    if not found:
        raise DeletionError(f"{unit.qualname} is not defined at the top of {unit.path}")
    return module.with_changes(body=body), removed


def _edit_method(klass: cst.BaseStatement, method: str, mode: str) -> cst.ClassDef:
    """The class with `method` stubbed or removed; removed, the class-body lines that read it at import go with it
    (`__radd__ = __add__`, and what aliases those), else the class body fails with a NameError."""
    if not isinstance(klass, cst.ClassDef):
        raise DeletionError(f"{klass} is not a class")
    members: list[cst.BaseStatement | cst.BaseSmallStatement] = []
    gone = {method}
    for member in klass.body.body:
        if isinstance(member, cst.FunctionDef) and member.name.value == method:
            if mode == "stub":
                members.append(_stubbed(member))
            continue
        if mode == "remove" and isinstance(member, cst.SimpleStatementLine) and _reads(member, gone):
            gone |= _assigned(member)
            continue
        members.append(member)
    if not members:
        members = [cst.SimpleStatementLine([cst.Pass()])]
    return klass.with_changes(body=klass.body.with_changes(body=members))


def _reads(line: cst.SimpleStatementLine, names: set[str]) -> bool:
    return any(name.value in names for name in m.findall(line, m.Name()) if isinstance(name, cst.Name))


def _assigned(line: cst.SimpleStatementLine) -> set[str]:
    """The plain names a class-body line binds (`a = b = c`, `a: T = c`)."""
    targets = [t.target for s in line.body if isinstance(s, cst.Assign) for t in s.targets]
    targets += [s.target for s in line.body if isinstance(s, cst.AnnAssign)]
    return {target.value for target in targets if isinstance(target, cst.Name)}


def delete_unit(layout: RepoLayout, unit: Unit, mode: str) -> Deletion:
    """The file changes that delete `unit` in `mode`, with import-time references fixed so the package imports."""
    if unit.kind not in MODE_KINDS[mode]:
        raise DeletionError(f"mode {mode!r} deletes {', '.join(MODE_KINDS[mode])}, not a {unit.kind}")
    sources = {path: (layout.root / path).read_text(encoding="utf-8") for path in layout.modules}
    if mode == "file":
        changed: dict[str, str | None] = dict(
            fix_imports(layout, sources, gone_modules={layout.modules[unit.path]}, gone_names={})
        )
        changed[unit.path] = None
    else:
        edited: dict[str, str] = {}
        gone_names: dict[str, set[str]] = {}
        for path in dict.fromkeys(piece.path for piece in unit.pieces):  # a group's parts may span modules
            module, removed = cst.parse_module(sources[path]), set[str]()
            for piece in unit.pieces:
                if piece.path == path:
                    module, gone = _edit_top_level(module, piece, mode)
                    removed |= gone
            edited[path] = sources[path] = module.code
            gone_names[layout.modules[path]] = removed
        changed = dict(fix_imports(layout, sources, gone_modules=set(), gone_names=gone_names))
        changed.update({path: changed.get(path, text) for path, text in edited.items()})
    original = {path: (layout.root / path).read_text(encoding="utf-8") for path in changed}
    differing = {path: text for path, text in changed.items() if text != original[path]}
    if not differing:
        raise DeletionError(f"deleting {unit.qualname} in mode {mode!r} changes nothing")
    return Deletion(unit=unit, mode=mode, changed=differing, original=original)
