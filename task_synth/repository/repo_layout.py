"""Where a repository keeps its package source and its tests, and the dotted name of each module."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

SKIPPED_DIRS = {".git", ".venv", "venv", "build", "dist", ".tox", ".nox", "node_modules", "__pycache__", "docs", "doc"}
TEST_DIRS = {"tests", "test", "testing"}


def is_test_path(path: str) -> bool:
    """Test modules, conftest files and everything under a tests directory."""
    parts = Path(path).parts
    name = parts[-1]
    return (
        name == "conftest.py"
        or name.startswith("test_")
        or name.endswith("_test.py")
        or any(part in TEST_DIRS for part in parts[:-1])
    )


def python_files(root: Path) -> list[str]:
    """Every .py file under `root` as a sorted relative path, skipping tool and build directories."""
    found = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in relative.parts[:-1]):
            continue
        found.append(relative.as_posix())
    return sorted(found)


@dataclass(frozen=True)
class RepoLayout:
    """The package modules (path -> dotted name), the test files, and the importable roots of one checkout."""

    root: Path
    modules: dict[str, str]
    test_files: list[str]
    # The first regular package of each tree (`jaraco.functools` inside the namespace `jaraco`), or a single module.
    roots: tuple[str, ...] = ()
    # Files the build writes (a version file): part of every workspace, never deleted (repository/generated_files.py).
    generated: frozenset[str] = frozenset()

    @property
    def top_packages(self) -> list[str]:
        return sorted(set(self.roots) or {name.split(".")[0] for name in self.modules.values()})

    @cached_property
    def test_texts(self) -> dict[str, str]:
        """The text of each test file (path -> text), read once."""
        return {path: (self.root / path).read_text(encoding="utf-8", errors="replace") for path in self.test_files}


# Top-level scripts of a flat layout that are never the project's single module.
NOT_MODULES = {"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "tasks.py", "versioneer.py", "__main__.py"}


def module_name(path: str, source_root: str) -> str:
    relative = Path(path).relative_to(source_root) if source_root else Path(path)
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_namespace_dir(root: Path, directory: Path) -> bool:
    """A directory that only holds packages (PEP 420 namespace, like `jaraco/`), not a source root like `src/`."""
    if directory == Path(".") or directory.name in ("src", "lib") or not directory.name.isidentifier():
        return False
    return not (root / directory / "__init__.py").exists() and not any((root / directory).glob("*.py"))


def _single_modules(root: Path, files: list[str], tests: list[str]) -> dict[str, str]:
    """Top-level modules (six.py), at the root or under src/, for a project that has no package."""
    found = {}
    for path in files:
        parent = Path(path).parent
        if path not in tests and parent in (Path("."), Path("src")) and Path(path).name not in NOT_MODULES:
            found[path] = Path(path).stem
    return found


def read_layout(root: Path) -> RepoLayout:
    """Find the top-level packages (directories with __init__.py whose parent has none) and the tests.

    A namespace directory above a package is part of its name; with no package at all, top-level modules count.
    """
    files = python_files(root)
    tests = [path for path in files if is_test_path(path)]
    modules: dict[str, str] = {}
    roots: set[str] = set()
    for path in files:
        if path in tests or Path(path).name in ("setup.py", "conftest.py", "noxfile.py"):
            continue
        parent = Path(path).parent
        if not (root / parent / "__init__.py").exists():
            continue
        top = parent
        while top.parent != Path(".") and (root / top.parent / "__init__.py").exists():
            top = top.parent
        base = top.parent
        while _is_namespace_dir(root, base):
            base = base.parent
        source_root = base.as_posix() if base != Path(".") else ""
        modules[path] = module_name(path, source_root)
        roots.add(module_name((top / "__init__.py").as_posix(), source_root))
    if not modules:
        modules = _single_modules(root, files, tests)
        roots = set(modules.values())
    return RepoLayout(root=root, modules=modules, test_files=tests, roots=tuple(sorted(roots)))
