"""Which paths of a submission are graded: one policy, with the reason for every refusal."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

TEST_DIRS = frozenset({"tests", "test", "testing"})
# Files that decide how tests are found, configured or installed rather than what the code does.
CONFIG_FILES = frozenset(
    {
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "noxfile.py",
        "setup.py",
        "conftest.py",
    }
)
STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize"})
METADATA_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".egg")
COMPILED_SUFFIXES = (".so", ".pyd", ".pyc", ".pyo", ".dll", ".dylib")
# zipimport loads modules from these once one is on sys.path or a package's __path__.
ARCHIVE_SUFFIXES = (".zip", ".whl", ".pyz", ".pyzw", ".jar")
MODULE_SUFFIXES = (".py", ".pyw", *COMPILED_SUFFIXES)
# Where a new top-level module would sit beside the package on sys.path (pytest may put the root there itself).
DEFAULT_IMPORT_ROOTS = frozenset({"", "src", "lib"})


@dataclass(frozen=True)
class PathPolicy:
    """The paths one task protects: its pristine tests, config and start-up hooks, and its import roots."""

    test_files: frozenset[str]
    existing: frozenset[str] = frozenset()
    import_roots: frozenset[str] = DEFAULT_IMPORT_ROOTS

    @classmethod
    def for_task(cls, test_files: list[str], deleted_paths: list[str], pristine_files: set[str]) -> PathPolicy:
        """The policy of one task; the folder above each deleted unit's top package is an import root too."""
        roots = set(DEFAULT_IMPORT_ROOTS)
        for path in deleted_paths:
            folder = posixpath.dirname(path)
            while folder and f"{folder}/__init__.py" in pristine_files:
                folder = posixpath.dirname(folder)
            roots.add(folder)
        existing = set(pristine_files)
        for path in pristine_files:
            while path := posixpath.dirname(path):
                existing.add(path)
        return cls(frozenset(test_files), frozenset(existing), frozenset(roots))

    def refusal(self, path: str, is_new: bool) -> str | None:
        """Why a change to `path` is not graded, or None when it is."""
        parts = path.split("/")
        name = parts[-1]
        if not path or path.startswith("/") or any(part in ("", ".", "..") for part in parts):
            return "not a plain relative path"
        if path in self.test_files:
            return "a pristine test file; the grader restores it"
        if (
            any(part in TEST_DIRS for part in parts[:-1])
            or (name.startswith("test_") and name.endswith(".py"))
            or name.endswith("_test.py")
        ):
            return "test code; only the pristine tests are run"
        if name in CONFIG_FILES:
            return "test or build configuration; the pristine configuration is used"
        if name.endswith(".pth"):
            return "a .pth file runs code when Python starts"
        if any(part.split(".")[0] in STARTUP_MODULES for part in parts):
            return "sitecustomize and usercustomize run code when Python starts"
        if any(part.endswith(METADATA_SUFFIXES) for part in parts):
            return "package metadata can declare pytest plugins and entry points"
        if name.endswith(COMPILED_SUFFIXES):
            return "compiled code is not graded; submit source"
        if name.lower().endswith(ARCHIVE_SUFFIXES):
            return "an archive can carry modules onto the import path; submit source"
        shadow = self._new_top_level_module(parts) if is_new else None
        if shadow:
            return (
                f"a new top-level module {shadow!r} could shadow pytest, the standard library or an installed package"
            )
        return None

    def _new_top_level_module(self, parts: list[str]) -> str | None:
        if not parts[-1].endswith(MODULE_SUFFIXES):
            return None  # not importable, whatever folder it is in
        for depth in range(len(parts)):
            root, top = "/".join(parts[:depth]), "/".join(parts[: depth + 1])
            if root in self.import_roots and top not in self.existing:
                return parts[depth].split(".")[0]
        return None
