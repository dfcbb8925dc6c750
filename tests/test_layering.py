"""The parts depend one way (proto <- env_server, trainer_client; sandbox <- env_server, task_synth), and only sandbox/
talks to Docker. Inside a part, each room imports only itself, the rooms to its left and the part's ground (top-level
modules below every room: settings, errors, the task store's reader); the part's other top-level modules (its app,
command line, recipe) sit above every room:
    sandbox: runtime < lifecycle < proxy
    env_server: observability < grading < traces < stepping < lifecycle < dashboard, harbor
    task_synth: repository < candidates < validation, store (validation decides; the store imports nothing of it)
    trainer_client: env < rollout < policy < channels < train, replay
No module imports itself back through others: there is no import circle. Read from the imports themselves, with ast
(no Docker). No module of ours is longer than MAX_MODULE_LINES: one that grows past it is usually two ideas."""

import ast
import functools
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
# Each part's rooms, from left to right. A new room comes with its place here.
ROOMS = {
    "sandbox": ("runtime", "lifecycle", "proxy"),
    "env_server": ("observability", "grading", "traces", "stepping", "lifecycle", "dashboard", "harbor"),
    "task_synth": ("repository", "candidates", "validation", "store"),
    "trainer_client": ("env", "rollout", "policy", "channels", "train", "replay"),
    "regrow": ("bench", "stack"),
}
# Rooms that stand beside the room to their left rather than above it: neither imports the other.
BESIDE = {
    "sandbox": {},
    "env_server": {"harbor": "dashboard"},
    "task_synth": {"store": "validation"},
    "trainer_client": {"replay": "train"},
    "regrow": {"stack": "bench"},
}
# Each part's top-level modules below every room, which every room may import.
GROUND = {
    "sandbox": {"archive_extraction", "errors", "layout", "limits", "settings"},
    "env_server": {"settings", "task_store", "frontier_sampler"},
    "task_synth": {"errors", "settings", "stage_clock", "task_evidence"},
    "trainer_client": set(),
    "regrow": {"output", "settings_commands"},
}
MAX_MODULE_LINES = 400


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


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# Every module of ours by its dotted name (generated ones too), so that an import resolves to the module it loads.
OURS = {_module_name(path): path for part in PARTS for path in (ROOT / part).rglob("*.py")}


def _package(path: Path) -> str:
    module = _module_name(path)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _ours(name: str) -> str | None:
    """The module of ours that importing `name` loads: itself, or the module that holds the name it imports."""
    while name and name not in OURS:
        name = name.rpartition(".")[0]
    return name or None


def _import_from(node: ast.ImportFrom, package: str) -> list[str]:
    """`from base import name`: base.name where that is a module, else base; a relative base is resolved."""
    base = node.module or ""
    if node.level:
        anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        base = f"{anchor}.{base}" if base else anchor
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in OURS else base for alias in node.names]


@functools.cache
def _imported(path: Path) -> frozenset[str]:
    """Every module of ours the file imports, wherever the import stands (under TYPE_CHECKING, inside a function)
    and however it is written (relative, `from package import module`, importlib.import_module)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += _import_from(node, _package(path))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if called == "import_module" and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
    return frozenset(found for name in names if (found := _ours(name)) and found != _module_name(path))


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph[module]
    return seen


@functools.cache
def _circles() -> list[list[str]]:
    """The modules that import each other, directly or through others, one circle each (strongly connected
    components of more than one module). A module importing its own package (the package's __init__) does not count."""
    graph = {module: set(_imported(path)) - {_package(path)} for module, path in OURS.items()}
    reached = {module: _reached(graph, module) for module in graph}
    circles = {tuple(sorted(m for m in reached[module] if module in reached[m])) for module in graph}
    return sorted(list(circle) for circle in circles if len(circle) > 1)


def _room(module: str) -> str:
    """The room (or top-level module) a module of a part is in: `env_server.grading.run` gives grading."""
    return module.split(".")[1]


def _rooms_imported(path: Path, part: str) -> set[str]:
    return {_room(module) for module in _imported(path) if module.startswith(f"{part}.")}


def _modules(part: str) -> list[Path]:
    return [path for path in (ROOT / part).rglob("*.py") if "_pb2" not in path.name]


@pytest.mark.parametrize("part", PARTS)
def test_each_part_imports_only_the_parts_below_it(part):
    upward = {
        str(path.relative_to(ROOT)): sorted((_imports(path) & set(PARTS)) - ALLOWED[part]) for path in _modules(part)
    }
    assert {path: names for path, names in upward.items() if names} == {}


@pytest.mark.parametrize("part", PARTS)
def test_no_module_of_a_part_imports_itself_back_through_others(part):
    assert [circle for circle in _circles() if any(module.split(".")[0] == part for module in circle)] == []


@pytest.mark.parametrize("part", ROOMS)
def test_each_part_has_no_room_outside_its_order(part):
    rooms = {path.parent.name for path in (ROOT / part).glob("*/__init__.py")}
    assert rooms == set(ROOMS[part])


@pytest.mark.parametrize(("part", "room"), [(part, room) for part, rooms in ROOMS.items() for room in rooms])
def test_each_room_imports_only_the_rooms_left_of_it_and_its_parts_ground(part, room):
    order = ROOMS[part]
    allowed = (set(order[: order.index(room) + 1]) - {BESIDE[part].get(room)}) | GROUND[part]
    rightward = {
        str(path.relative_to(ROOT)): sorted(_rooms_imported(path, part) - allowed)
        for path in _modules(f"{part}/{room}")
    }
    assert {path: names for path, names in rightward.items() if names} == {}


@pytest.mark.parametrize("part", ROOMS)
def test_a_parts_ground_imports_no_room_and_no_module_above_the_rooms(part):
    upward = {name: sorted(_rooms_imported(ROOT / part / f"{name}.py", part) - GROUND[part]) for name in GROUND[part]}
    assert {name: names for name, names in upward.items() if names} == {}


@pytest.mark.parametrize("part", [part for part in PARTS if part != "sandbox"])
def test_only_sandbox_imports_docker(part):
    assert [str(path.relative_to(ROOT)) for path in _modules(part) if "docker" in _imports(path)] == []


@pytest.mark.parametrize("part", PARTS)
def test_no_module_of_a_part_is_longer_than_the_limit(part):
    lines = {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines()) for path in _modules(part)}
    assert {path: count for path, count in lines.items() if count > MAX_MODULE_LINES} == {}
