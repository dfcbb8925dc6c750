"""The programs the sandbox runs inside a container (sandbox/runtime/inside/) are passed as `python3 -c` text to
whatever python the image has: they may import the standard library only, never regrow or a third-party package."""

import ast
import sys
from pathlib import Path

INSIDE = Path(__file__).parents[2] / "sandbox" / "runtime" / "inside"


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add("." if node.level else (node.module or "").split(".")[0])
    return names


def test_every_inside_program_imports_the_standard_library_only():
    programs = sorted(path for path in INSIDE.glob("*.py") if path.name != "__init__.py")
    assert {path.name for path in programs} >= {"stop_then_kill.py", "primed_runner.py"}
    outside = {path.name: sorted(_imported(path) - set(sys.stdlib_module_names)) for path in programs}
    assert outside == {path.name: [] for path in programs}
