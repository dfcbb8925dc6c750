"""Drop the import-time references to deleted names and modules, so that the package still imports."""

from __future__ import annotations

import functools

import libcst as cst
from libcst.helpers import get_full_name_for_node

from proto.python_ast import literal_value
from task_synth.candidates.units import referenced_names
from task_synth.repository.repo_layout import RepoLayout


def _is_gone_module(name: str, gone_modules: set[str]) -> bool:
    return any(name == gone or name.startswith(gone + ".") for gone in gone_modules)


def _source_module(node: cst.ImportFrom, module_name: str, is_package: bool) -> str:
    base = get_full_name_for_node(node.module) if node.module else ""
    if not node.relative:
        return base or ""
    package = module_name if is_package else module_name.rpartition(".")[0]
    for _ in range(len(node.relative) - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{base}" if base else package


def _bound_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None:
        return get_full_name_for_node(alias.asname.name) or ""
    return (get_full_name_for_node(alias.name) or "").split(".")[0]


def _kept_aliases(aliases: list[cst.ImportAlias]) -> list[cst.ImportAlias]:
    # The last alias of an unparenthesised import must carry no comma.
    if aliases:
        aliases[-1] = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return aliases


def _fixed_import(small, module_name, is_package, gone_modules, gone_names, lost: set[str]):
    """The import with deleted names dropped (None when nothing is left); adds the names it no longer binds to
    `lost`."""
    if isinstance(small, cst.ImportFrom):
        source = _source_module(small, module_name, is_package)
        if isinstance(small.names, cst.ImportStar):
            return None if _is_gone_module(source, gone_modules) else small
        if _is_gone_module(source, gone_modules):
            lost.update(_bound_name(alias) for alias in small.names)
            return None
        kept = []
        for alias in small.names:
            name = get_full_name_for_node(alias.name) or ""
            if _is_gone_module(f"{source}.{name}", gone_modules) or name in gone_names.get(source, set()):
                lost.add(_bound_name(alias))
            else:
                kept.append(alias)
        if len(kept) == len(small.names):
            return small
        return small.with_changes(names=_kept_aliases(kept)) if kept else None
    if isinstance(small, cst.Import):
        kept = []
        for alias in small.names:
            if _is_gone_module(get_full_name_for_node(alias.name) or "", gone_modules):
                if alias.asname is not None:
                    lost.add(_bound_name(alias))
            else:
                kept.append(alias)
        if len(kept) == len(small.names):
            return small
        return small.with_changes(names=_kept_aliases(kept)) if kept else None
    return small


def _filtered_all(small: cst.BaseSmallStatement, lost: set[str]) -> cst.BaseSmallStatement | None:
    """`__all__ = [...]` without the lost names; None when the statement is not an `__all__` list."""
    if not isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)) or not isinstance(
        small.value, (cst.List, cst.Tuple)
    ):
        return None
    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
    if not any(isinstance(t, cst.Name) and t.value == "__all__" for t in targets):
        return None
    listed = small.value.elements
    elements = [
        element
        for element in listed
        # The literal read under the parse lock: libcst's `evaluated_value` is an unlocked ast.literal_eval.
        if not (isinstance(element.value, cst.SimpleString) and literal_value(element.value.value) in lost)
    ]
    if len(elements) == len(listed):
        return small  # untouched: reprinted, it lost its trailing comma, an edit in every task of the repository
    trailing_comma = isinstance(listed[-1].comma, cst.Comma)
    if elements and trailing_comma:
        elements[-1] = elements[-1].with_changes(comma=listed[-1].comma)  # its layout up to the closing bracket
    elif elements and not (isinstance(small.value, cst.Tuple) and len(elements) == 1):
        elements[-1] = elements[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return small.with_changes(value=small.value.with_changes(elements=elements))


def _assigned_names(small: cst.BaseSmallStatement) -> set[str]:
    if isinstance(small, cst.Assign):
        return set().union(*(referenced_names(target.target) for target in small.targets))
    if isinstance(small, (cst.AnnAssign, cst.AugAssign)):
        return referenced_names(small.target)
    return set()


def _import_time_parts(definition: cst.FunctionDef | cst.ClassDef) -> list[cst.CSTNode]:
    """What a def or class statement evaluates when the module is imported."""
    parts: list[cst.CSTNode] = [decorator.decorator for decorator in definition.decorators]
    if isinstance(definition, cst.FunctionDef):
        return [*parts, definition.params, *([definition.returns] if definition.returns else [])]
    members = [member for member in definition.body.body if isinstance(member, cst.SimpleStatementLine)]
    return [*parts, *definition.bases, *definition.keywords, *members]


def _module_bindings(module: cst.Module, module_name: str, is_package: bool, known: set[str]) -> dict[str, str]:
    """The names the module's top-level imports bind to modules (`from . import cli`: cli -> pkg.cli), so that an
    attribute read such as `cli.main` can be followed to the module that defines `main`."""
    bindings: dict[str, str] = {}
    for statement in module.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = get_full_name_for_node(alias.name) or ""
                    bound = full if alias.asname is not None else full.split(".")[0]
                    bindings[_bound_name(alias)] = bound
            elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                source = _source_module(small, module_name, is_package)
                for alias in small.names:
                    full = f"{source}.{get_full_name_for_node(alias.name)}"
                    if full in known:
                        bindings[_bound_name(alias)] = full
    return bindings


class _AttributeReads(cst.CSTVisitor):
    def __init__(self) -> None:
        self.dotted: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        dotted = get_full_name_for_node(node)
        if dotted:
            self.dotted.append(dotted)
            return False
        return True


def _reads_gone_attribute(node: cst.CSTNode, bindings: dict[str, str], gone_names: dict[str, set[str]]) -> bool:
    """Whether `node` reads a deleted name through a module it imported: `cli.main`, `pkg.cli.main`."""
    reads = _AttributeReads()
    node.visit(reads)
    for dotted in reads.dotted:
        head, *rest = dotted.split(".")
        if head not in bindings:
            continue
        for at in range(len(rest)):
            if rest[at] in gone_names.get(".".join([bindings[head], *rest[:at]]), ()):
                return True
    return False


def _same_nodes(new: list, old) -> bool:
    return len(new) == len(old) and all(a is b for a, b in zip(new, old))


def _fixed_module(
    module: cst.Module, module_name: str, is_package: bool, gone_modules, gone_names, known: set[str]
) -> tuple[cst.Module, set[str]]:
    """The module without what reads a deleted name at import time (the module itself when nothing does), and the
    names it no longer binds."""
    lost = set(gone_names.get(module_name, set()))
    bindings = _module_bindings(module, module_name, is_package, known)

    def breaks(node: cst.CSTNode) -> bool:
        return bool(referenced_names(node) & lost) or _reads_gone_attribute(node, bindings, gone_names)

    def fixed_small(small: cst.BaseSmallStatement) -> cst.BaseSmallStatement | None:
        small = _fixed_import(small, module_name, is_package, gone_modules, gone_names, lost)
        if small is None:
            return None
        filtered = _filtered_all(small, lost)
        if filtered is not None:
            return filtered
        if not isinstance(small, (cst.Import, cst.ImportFrom)) and breaks(small):
            lost.update(_assigned_names(small))
            return None
        return small

    body: list[cst.BaseStatement] = []
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            if any(breaks(part) for part in _import_time_parts(statement)):
                lost.add(statement.name.value)
            else:
                body.append(statement)
        elif not isinstance(statement, cst.SimpleStatementLine):
            body.append(statement)
        elif _same_nodes(kept := [k for k in map(fixed_small, statement.body) if k is not None], statement.body):
            body.append(statement)  # untouched: kept as it is, so that the module is not printed again
        elif kept:
            kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            body.append(statement.with_changes(body=kept))
    return (module if _same_nodes(body, module.body) else module.with_changes(body=body)), lost


@functools.lru_cache(maxsize=512)
def _parsed(text: str) -> cst.Module:
    """A module's tree by its text: every deletion of a repository reads the same untouched modules (libcst trees
    are immutable, so one tree serves every caller)."""
    return cst.parse_module(text)


def fix_imports(
    layout: RepoLayout, sources: dict[str, str], gone_modules: set[str], gone_names: dict[str, set[str]]
) -> dict[str, str]:
    """New text of every module that had to change, iterated until no module loses another name."""
    gone_names = {module: set(names) for module, names in gone_names.items()}
    changed: dict[str, str] = {}
    known = set(layout.modules.values())
    for _ in range(len(layout.modules) + 2):
        progress = False
        for path, module_name in sorted(layout.modules.items()):
            if _is_gone_module(module_name, gone_modules):
                continue
            is_package = path.endswith("__init__.py")
            parsed = _parsed(sources[path])
            fixed, lost = _fixed_module(parsed, module_name, is_package, gone_modules, gone_names, known)
            if fixed is not parsed and fixed.code != sources[path]:
                sources[path] = changed[path] = fixed.code
                progress = True
            if lost - gone_names.get(module_name, set()):
                gone_names.setdefault(module_name, set()).update(lost)
                progress = True
        if not progress:
            break
    return changed
