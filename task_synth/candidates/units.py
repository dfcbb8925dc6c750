"""Deletion units of a repository (functions, methods, classes, modules, features), their ranking, and how a task
record names what a deletion removes."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from proto.tasks import DeletedUnit
from task_synth.repository.repo_layout import RepoLayout

MIN_STATEMENTS = 3
_BRANCHES = (
    cst.If,
    cst.For,
    cst.While,
    cst.Try,
    cst.ExceptHandler,
    cst.BooleanOperation,
    cst.IfExp,
    cst.CompIf,
    cst.With,
)


@dataclass(frozen=True)
class Unit:
    """One piece of code a task can delete; line numbers are 1-based and inclusive."""

    path: str
    qualname: str
    kind: str
    start_line: int
    end_line: int
    body_lines: tuple[tuple[int, int], ...]
    statements: int
    complexity: int
    helpers: tuple[str, ...] = field(default=())
    # Lines that run only when the unit is used, not when it is defined: a class's method bodies; None means
    # `body_lines` (a function's body), () never (a module runs as it is imported, by its tests too).
    call_lines: tuple[tuple[int, int], ...] | None = None
    # A multi-unit feature's functions and methods, deleted together (candidates/coverage_groups.py); () otherwise.
    parts: tuple[Unit, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.path}::{self.qualname}::{self.kind}"

    @property
    def pieces(self) -> tuple[Unit, ...]:
        """What a deletion of this unit edits one by one: a group's parts, or the unit itself."""
        return self.parts or (self,)

    @property
    def used_lines(self) -> tuple[tuple[int, int], ...]:
        return self.body_lines if self.call_lines is None else self.call_lines


def _statements(node: cst.CSTNode) -> int:
    counter = _StatementCounter()
    node.visit(counter)
    return counter.count


class _StatementCounter(cst.CSTVisitor):
    def __init__(self) -> None:
        self.count = 0
        self.branches = 0

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.count += len(node.body)

    def visit_BaseCompoundStatement(self, node: cst.BaseCompoundStatement) -> None:
        self.count += 1

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _BRANCHES):
            self.branches += 1
        return super().on_visit(node)


def _complexity(node: cst.CSTNode) -> int:
    counter = _StatementCounter()
    node.visit(counter)
    return 1 + counter.branches


def referenced_names(node: cst.CSTNode) -> set[str]:
    """Bare names a node reads or binds (attribute names after a dot are not bare names)."""
    collector = _NameCollector()
    node.visit(collector)
    return collector.names


class _NameCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False


def _docstring_lines(body: cst.BaseSuite, positions) -> int:
    """The last line of a leading docstring, or 0."""
    if isinstance(body, cst.IndentedBlock) and body.body:
        first = body.body[0]
        if isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr):
            if isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
                return positions[first].end.line
    return 0


def _definition_unit(path: str, qualname: str, kind: str, node, positions) -> Unit:
    span = positions[node]
    start = min([span.start.line] + [positions[d].start.line for d in node.decorators])
    body_span = positions[node.body]
    after_doc = _docstring_lines(node.body, positions)
    body_start = max(body_span.start.line, after_doc + 1)
    return Unit(
        path=path,
        qualname=qualname,
        kind=kind,
        start_line=start,
        end_line=span.end.line,
        body_lines=((body_start, span.end.line),),
        statements=_statements(node.body),
        complexity=_complexity(node.body),
    )


def module_units(path: str, source: str, package_text: str) -> list[Unit]:
    """Functions, methods, classes and features defined at the top of one module.

    `package_text` is every other file of the repository joined, to tell which private helpers are used elsewhere.
    """
    wrapper = MetadataWrapper(cst.parse_module(source))
    positions = wrapper.resolve(PositionProvider)
    units: list[Unit] = []
    functions: dict[str, Unit] = {}
    referrers: dict[str, set[str]] = {}
    for index, statement in enumerate(wrapper.module.body):
        owner = f"<statement {index}>"
        if isinstance(statement, cst.FunctionDef):
            owner = statement.name.value
            functions[owner] = _definition_unit(path, owner, "function", statement, positions)
            units.append(functions[owner])
        elif isinstance(statement, cst.ClassDef):
            owner = statement.name.value
            methods = [
                _definition_unit(path, f"{owner}.{member.name.value}", "method", member, positions)
                for member in statement.body.body
                if isinstance(member, cst.FunctionDef)
            ]
            whole = _definition_unit(path, owner, "class", statement, positions)
            units += [replace(whole, call_lines=tuple(span for method in methods for span in method.body_lines))]
            units += methods
        for name in referenced_names(statement) - {owner}:
            referrers.setdefault(name, set()).add(owner)
    units += _features(path, functions, referrers, package_text)
    return [unit for unit in units if unit.statements >= MIN_STATEMENTS]


def _features(path: str, functions: dict[str, Unit], referrers: dict[str, set[str]], package_text: str) -> list[Unit]:
    """A public function plus the private helpers that only it mentions, anywhere in the repository."""
    features = []
    for name, unit in functions.items():
        if name.startswith("_"):
            continue
        helpers = [
            helper
            for helper in sorted(functions)
            if helper.startswith("_")
            and referrers.get(helper) == {name}
            and re.search(rf"\b{re.escape(helper)}\b", package_text) is None
        ]
        if not helpers:
            continue
        parts = [unit, *(functions[helper] for helper in helpers)]
        features.append(joined_unit(path, name, "feature", parts, helpers=tuple(helpers)))
    return features


def joined_unit(path: str, qualname: str, kind: str, members: list[Unit], **fields) -> Unit:
    """One unit over `members` of the module at `path`: their lines, statements and branches together."""
    return Unit(
        path=path,
        qualname=qualname,
        kind=kind,
        start_line=min(member.start_line for member in members),
        end_line=max(member.end_line for member in members),
        body_lines=tuple(span for member in members for span in member.body_lines),
        statements=sum(member.statements for member in members),
        complexity=sum(member.complexity for member in members),
        **fields,
    )


def enumerate_units(layout: RepoLayout) -> list[Unit]:
    """Every deletion unit of the repository's package, modules included, in a stable order."""
    texts = {path: (layout.root / path).read_text(encoding="utf-8", errors="replace") for path in layout.modules}
    tests_text = "\n".join(
        (layout.root / path).read_text(encoding="utf-8", errors="replace") for path in layout.test_files
    )
    units: list[Unit] = []
    for path, text in sorted(texts.items()):
        if path in layout.generated:
            continue
        others = "\n".join(other for other_path, other in texts.items() if other_path != path) + tests_text
        try:
            units += module_units(path, text, others)
        except cst.ParserSyntaxError:
            continue
        # A top-level name is the whole project (six.py): deleting it would leave nothing to test against.
        if Path(path).name not in ("__init__.py", "__main__.py") and "." in layout.modules[path]:
            lines = text.count("\n") + 1
            module = cst.parse_module(text)
            units.append(
                Unit(
                    path,
                    layout.modules[path],
                    "module",
                    1,
                    lines,
                    ((1, lines),),
                    _statements(module),
                    _complexity(module),
                    call_lines=(),
                )
            )
    return units


def rank_weight(unit: Unit, covering_tests: int) -> float:
    """Favour units that many tests cover, that are larger and that branch more."""
    return math.log1p(covering_tests) * math.log1p(unit.statements) * math.log1p(unit.complexity)


def sample_units(weighted: list[tuple[Unit, float]], count: int, seed: int) -> list[Unit]:
    """Weighted sampling without replacement (exponential keys), deterministic for a seed."""
    rng = random.Random(seed)
    keyed = []
    for unit, weight in sorted(weighted, key=lambda pair: pair[0].key):
        draw = rng.random()
        if weight > 0:
            keyed.append((math.log(draw or 1e-300) / weight, unit.key, unit))
    keyed.sort(key=lambda item: (-item[0], item[1]))
    return [unit for _, _, unit in keyed[:count]]


def deleted_units(unit: Unit) -> list[DeletedUnit]:
    """The units a deletion removes, as the task record names them: a group's parts, or the unit itself."""
    return [
        DeletedUnit(
            path=piece.path,
            qualname=piece.qualname,
            kind=piece.kind,  # type: ignore[arg-type]  # a piece is never a group
            start_line=piece.start_line,
            end_line=piece.end_line,
        )
        for piece in unit.pieces
    ]
