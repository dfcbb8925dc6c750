"""Where a repository keeps its package source and its tests, and the dotted name of each module."""

from __future__ import annotations

from dataclasses import dataclass
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
    """The package modules (path -> dotted name) and the test files of one checkout."""

    root: Path
    modules: dict[str, str]
    test_files: list[str]

    @property
    def top_packages(self) -> list[str]:
        return sorted({name.split(".")[0] for name in self.modules.values()})


def module_name(path: str, source_root: str) -> str:
    relative = Path(path).relative_to(source_root) if source_root else Path(path)
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_layout(root: Path) -> RepoLayout:
    """Find the top-level packages (directories with __init__.py whose parent has none) and the tests."""
    files = python_files(root)
    tests = [path for path in files if is_test_path(path)]
    modules: dict[str, str] = {}
    for path in files:
        if path in tests or Path(path).name in ("setup.py", "conftest.py", "noxfile.py"):
            continue
        parent = Path(path).parent
        if not (root / parent / "__init__.py").exists():
            continue
        top = parent
        while top.parent != Path(".") and (root / top.parent / "__init__.py").exists():
            top = top.parent
        source_root = top.parent.as_posix() if top.parent != Path(".") else ""
        modules[path] = module_name(path, source_root)
    return RepoLayout(root=root, modules=modules, test_files=tests)
