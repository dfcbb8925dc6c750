"""The parts depend one way (proto <- env_server, trainer_client; sandbox <- env_server, task_synth), and only
sandbox/ talks to Docker. Read from the imports themselves, with ast (no Docker)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PARTS = ("proto", "sandbox", "task_synth", "env_server", "trainer_client", "regrow")
# What each part may import of ours; regrow/ is the command line and the benchmarks, on top of everything.
ALLOWED = {
    "proto": {"proto"},
    "sandbox": {"sandbox"},
    "task_synth": {"task_synth", "sandbox", "proto"},
    "env_server": {"env_server", "sandbox", "proto"},
    "trainer_client": {"trainer_client", "proto"},
    "regrow": set(PARTS),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args:
            if isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names.add(node.args[0].value.split(".")[0])
    return names


def _modules(part: str) -> list[Path]:
    return [path for path in (ROOT / part).rglob("*.py") if "_pb2" not in path.name]


@pytest.mark.parametrize("part", PARTS)
def test_each_part_imports_only_the_parts_below_it(part):
    upward = {
        str(path.relative_to(ROOT)): sorted((_imports(path) & set(PARTS)) - ALLOWED[part]) for path in _modules(part)
    }
    assert {path: names for path, names in upward.items() if names} == {}


@pytest.mark.parametrize("part", [part for part in PARTS if part != "sandbox"])
def test_only_sandbox_imports_docker(part):
    assert [str(path.relative_to(ROOT)) for path in _modules(part) if "docker" in _imports(path)] == []
