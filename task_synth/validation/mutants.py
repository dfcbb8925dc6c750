"""Mutants of a deleted unit: the original with one small change each, to measure whether a task's checks tell a wrong
implementation from the right one.

The changes are the classic ones: an arithmetic or bitwise operator swapped, a comparison flipped or loosened
(`<` to `<=`, `==` to `!=`, `in` to `not in`), `and` and `or` swapped, a `not` dropped, an integer constant moved by
one, `True` and `False` (and `min` and `max`, `any` and `all`) swapped, the first and the last element (`[0]`,
`[-1]`) swapped, and a statement dropped. Each mutant is the
whole module's text, so everything outside the unit stays byte for byte. libcst finds the sites; each mutant's text
is the source with one span replaced (transforming and printing the whole module per mutant took half a second each).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from proto.python_ast import parse_python

MAX_MUTANTS = 30

_BINARY: dict[type[cst.BaseBinaryOp], Callable[[], cst.BaseBinaryOp]] = {
    cst.Add: cst.Subtract,
    cst.Subtract: cst.Add,
    cst.Multiply: cst.Add,
    cst.Divide: cst.Multiply,
    cst.FloorDivide: cst.Multiply,
    cst.Modulo: cst.FloorDivide,
    cst.Power: cst.Multiply,
    cst.BitAnd: cst.BitOr,
    cst.BitOr: cst.BitAnd,
    cst.BitXor: cst.BitOr,
    cst.LeftShift: cst.RightShift,
    cst.RightShift: cst.LeftShift,
}
_COMPARISON: dict[type[cst.BaseCompOp], Callable[[], cst.BaseCompOp]] = {
    cst.LessThan: cst.LessThanEqual,
    cst.LessThanEqual: cst.LessThan,
    cst.GreaterThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.GreaterThan,
    cst.Equal: cst.NotEqual,
    cst.NotEqual: cst.Equal,
    cst.In: cst.NotIn,
    cst.NotIn: cst.In,
    cst.Is: cst.IsNot,
    cst.IsNot: cst.Is,
}


_NAMES = {"True": "False", "False": "True", "min": "max", "max": "min", "any": "all", "all": "any"}


@dataclass(frozen=True)
class Mutant:
    """One mutant: what changed, on which line of the module, and the module's whole new text."""

    kind: str
    line: int
    source: str


@dataclass(frozen=True)
class _Site:
    node: cst.CSTNode
    kind: str
    line: int
    change: Callable[[cst.CSTNode], cst.CSTNode]


class _Sites(cst.CSTVisitor):
    """Every place inside the unit (a function or method, by qualified name) where a mutant can change one thing."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, qualname: str):
        self.target, self.path, self.inside = qualname.split("."), list[str](), 0
        self.sites: list[_Site] = []
        self.function_bodies: set[int] = set()

    def _enter(self, name: str) -> None:
        self.path.append(name)
        if self.path == self.target:
            self.inside += 1

    def _leave(self) -> None:
        if self.path == self.target:
            self.inside -= 1
        self.path.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._enter(node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._leave()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._enter(node.name.value)
        self.function_bodies.add(id(node.body))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._leave()

    def _add(self, node: cst.CSTNode, kind: str, change: Callable[[cst.CSTNode], cst.CSTNode]) -> None:
        if self.inside:
            line = self.get_metadata(PositionProvider, node).start.line
            self.sites.append(_Site(node, kind, line, change))

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        """Each statement of a block in the unit may be dropped: not a docstring, nor a block's only statement."""
        statements = list(node.body)
        if statements and _is_docstring(statements[0]):
            statements = statements[1:]
        if statements and id(node) in self.function_bodies and _returns_none(statements[-1]):
            statements = statements[:-1]  # dropping a function's last `return None` changes nothing: no mutant
        if len(statements) > 1:
            for statement in statements:
                self._add(statement, "dropped statement", _dropped)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        swap = _BINARY.get(type(node.operator))
        if swap:
            self._add(node, "operator", lambda n, swap=swap: n.with_changes(operator=swap()))  # type: ignore[misc]

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        swapped = {cst.AddAssign: cst.SubtractAssign, cst.SubtractAssign: cst.AddAssign}.get(type(node.operator))
        if swapped:
            self._add(node, "operator", lambda n, s=swapped: n.with_changes(operator=s()))  # type: ignore[misc]

    def visit_ComparisonTarget(self, node: cst.ComparisonTarget) -> None:
        swap = _COMPARISON.get(type(node.operator))
        if swap:
            self._add(node, "comparison", lambda n, swap=swap: n.with_changes(operator=swap()))  # type: ignore[misc]

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        swap = cst.Or if isinstance(node.operator, cst.And) else cst.And
        self._add(node, "boolean", lambda n, swap=swap: n.with_changes(operator=swap()))  # type: ignore[misc]

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        if isinstance(node.operator, cst.Not):
            self._add(node, "negation", lambda n: n.expression)  # type: ignore[attr-defined]

    def visit_Integer(self, node: cst.Integer) -> None:
        try:
            value = int(node.value.replace("_", ""), 0)
        except ValueError:
            return
        self._add(node, "constant", lambda n, v=value: cst.Integer(str(v + 1)))  # type: ignore[misc]

    def visit_Index(self, node: cst.Index) -> None:
        """`[0]` and `[-1]`, the first and the last element, swapped: a stack's bottom for its top."""
        value = node.value
        if isinstance(value, cst.Integer) and value.value == "0":
            last = cst.UnaryOperation(cst.Minus(), cst.Integer("1"))
            self._add(node, "boundary", lambda n, last=last: n.with_changes(value=last))  # type: ignore[misc]
        elif (
            isinstance(value, cst.UnaryOperation)
            and isinstance(value.operator, cst.Minus)
            and isinstance(value.expression, cst.Integer)
            and value.expression.value == "1"
        ):
            self._add(node, "boundary", lambda n: n.with_changes(value=cst.Integer("0")))  # type: ignore[misc]

    def visit_Name(self, node: cst.Name) -> None:
        swap = _NAMES.get(node.value)
        if swap:
            kind = "constant" if swap in ("True", "False") else "builtin"
            self._add(node, kind, lambda n, s=swap: cst.Name(s))  # type: ignore[misc]


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def _returns_none(statement: cst.BaseStatement) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    returned = statement.body[0]
    if not isinstance(returned, cst.Return):
        return False
    return returned.value is None or (isinstance(returned.value, cst.Name) and returned.value.value == "None")


def _dropped(node: cst.CSTNode) -> cst.CSTNode:
    leading = getattr(node, "leading_lines", ())
    return cst.SimpleStatementLine([cst.Pass()], leading_lines=leading)


class _ReplaceOne(cst.CSTTransformer):
    def __init__(self, site: _Site):
        self.site = site

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.site.change(updated_node) if original_node is self.site.node else updated_node


class _Splicer:
    """Each mutant's text as the source with the site's span replaced; a whole-module transform where the span's text
    is not the site as printed on its own (a multi-line expression whose continuation lines follow the block's indent).
    """

    _LINE_BREAK = re.compile(r"\r\n|\r|\n")  # libcst's line breaks, not str.splitlines' (form feed, U+2028)

    def __init__(self, wrapper: MetadataWrapper, source: str):
        self.wrapper, self.source = wrapper, source
        self.code = wrapper.resolve(PositionProvider)
        self.line_starts = [0, *(match.end() for match in self._LINE_BREAK.finditer(source))]

    def _span(self, where: CodeRange) -> tuple[int, int]:
        return (
            self.line_starts[where.start.line - 1] + where.start.column,
            self.line_starts[where.end.line - 1] + where.end.column,
        )

    def _printed(self, node: cst.CSTNode) -> str:
        """The node's tokens as printed alone: its parentheses and the whitespace around it are not in its span."""
        if getattr(node, "lpar", None) or getattr(node, "rpar", None):
            node = node.with_changes(lpar=[], rpar=[])
        return self.wrapper.module.code_for_node(node).strip()

    def mutated(self, site: _Site) -> str:
        start, end = self._span(self.code[site.node])
        if site.kind == "dropped statement":  # its tokens, not its leading comments, indent or line end
            text = self.source[:start] + "pass" + self.source[end:]
            if parse_python(text) is not None:  # behind proto's lock: synthesis jobs parse in threads
                return text
        else:
            span = self.source[start:end]
            start += len(span) - len(span.lstrip())  # a comparison's span holds the space before its operator
            if span.strip() == self._printed(site.node):
                end = start + len(span.strip())
                return self.source[:start] + self._printed(site.change(site.node)) + self.source[end:]
        return self.wrapper.module.visit(_ReplaceOne(site)).code


@functools.lru_cache(maxsize=8)  # every candidate of a repository mutates the same few original modules
def _parsed(source: str) -> tuple[MetadataWrapper, _Splicer] | None:
    try:
        wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    except cst.ParserSyntaxError:
        return None
    return wrapper, _Splicer(wrapper, source)


@functools.lru_cache(maxsize=256)
def _sites(source: str, qualname: str) -> tuple[_Splicer, list[_Site]] | None:
    parsed = _parsed(source)
    if parsed is None:
        return None
    wrapper, splicer = parsed
    sites = _Sites(qualname)
    wrapper.visit(sites)
    return splicer, sites.sites


def mutants_of(source: str, qualname: str, rng: random.Random, limit: int = MAX_MUTANTS) -> list[Mutant]:
    """Up to `limit` mutants of the function or method `qualname` in module `source`, drawn by `rng` when there are
    more; none when the source does not parse or holds no such unit."""
    found = _sites(source, qualname)
    if found is None:
        return []
    splicer, sites = found
    chosen = sites if len(sites) <= limit else rng.sample(sites, limit)
    mutants = []
    for site in sorted(chosen, key=lambda s: s.line):
        text = splicer.mutated(site)
        if text != source:
            mutants.append(Mutant(site.kind, site.line, text))
    return mutants


def site_lines(source: str, qualname: str) -> set[int]:
    """The lines of the unit `qualname` where some mutant can change something (all of them, not a sample)."""
    found = _sites(source, qualname)
    return {site.line for site in found[1]} if found else set()
