"""The parts depend one way (proto <- env_server, trainer_client; sandbox <- env_server, task_synth), the rooms
inside trainer_client too (env < rollout < policy < channels < train, replay), and only sandbox/ talks to Docker.
Read from the imports themselves, with ast (no Docker)."""

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
# trainer_client's rooms, each importing only itself and the rooms to its left; its top-level cli.py sits above them.
TRAINER_ROOMS = ("env", "rollout", "policy", "channels", "train", "replay")
ROOM_ALLOWED = {room: set(TRAINER_ROOMS[: index + 1]) for index, room in enumerate(TRAINER_ROOMS)}
ROOM_ALLOWED["replay"] -= {"train"}  # the two top rooms stand side by side: neither imports the other


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


def _trainer_client_names(path: Path) -> set[str]:
    """What the module imports of trainer_client, one level down: `trainer_client.rollout.stream` gives rollout."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            dotted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            dotted = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args:
            argument = node.args[0]
            dotted = [argument.value] if isinstance(argument, ast.Constant) and isinstance(argument.value, str) else []
        else:
            continue
        names |= {name.split(".")[1] for name in dotted if name.startswith("trainer_client.")}
    return names


def _modules(part: str) -> list[Path]:
    return [path for path in (ROOT / part).rglob("*.py") if "_pb2" not in path.name]


@pytest.mark.parametrize("part", PARTS)
def test_each_part_imports_only_the_parts_below_it(part):
    upward = {
        str(path.relative_to(ROOT)): sorted((_imports(path) & set(PARTS)) - ALLOWED[part]) for path in _modules(part)
    }
    assert {path: names for path, names in upward.items() if names} == {}


def test_trainer_client_has_no_room_outside_the_order():
    rooms = {path.parent.name for path in (ROOT / "trainer_client").glob("*/__init__.py")}
    assert rooms == set(TRAINER_ROOMS)


@pytest.mark.parametrize("room", TRAINER_ROOMS)
def test_each_trainer_client_room_imports_only_the_rooms_left_of_it(room):
    rightward = {
        str(path.relative_to(ROOT)): sorted(_trainer_client_names(path) - ROOM_ALLOWED[room])
        for path in _modules(f"trainer_client/{room}")
    }
    assert {path: names for path, names in rightward.items() if names} == {}


@pytest.mark.parametrize("part", [part for part in PARTS if part != "sandbox"])
def test_only_sandbox_imports_docker(part):
    assert [str(path.relative_to(ROOT)) for path in _modules(part) if "docker" in _imports(path)] == []
