"""Multi-unit features: the functions and methods that a group of tests reaches, found by coverage and deleted
together (FeatureBench's idea). A group of tests is a test file, class or function. Two readings of "reaches":

- affinity: the units of one module whose covering tests are mostly in the group, so shared utilities stay out;
- reach: the units anywhere in the package that the group runs and at most half of the suite runs, the most specific
  first, so a feature can span modules (h11's chunked bodies: a reader in `_readers`, a writer in `_writers`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from pathlib import PurePosixPath

from task_synth.candidates.units import Unit, joined_unit

GROUP_KIND = "group"
MIN_PARTS = 2
# More parts than this make a task that is a rewrite of the module, not a feature.
MAX_PARTS = 6
# The share of a unit's covering tests that must sit in the group for the unit to be part of its feature.
AFFINITY = 0.5
# A unit that more than this share of the suite runs is the package's shared machinery, in no group's reach.
SHARED = 0.5
PART_KINDS = ("function", "method")


def groups_of(node_id: str) -> list[str]:
    """The groups a test belongs to: its file, its class (for a test in one) and its test function (all its
    parameters)."""
    path, _, rest = node_id.partition("::")
    parts = rest.split("[", 1)[0].split("::")
    groups = [path, *("::".join([path, *parts[: depth + 1]]) for depth in range(len(parts)))]
    return list(dict.fromkeys(groups))


def coverage_groups(
    units: list[Unit], covering: Callable[[Unit], set[str]], runs_at_import: Callable[[Unit], bool] = lambda _: False
) -> list[Unit]:
    """The affinity groups, then the reach groups, in a stable order; a set of parts is made once.

    A unit whose body runs as the package imports (a decorator, a registry's setup) is no part: deleting it breaks the
    import, so every group holding it would be lost (semver's `_comparator` sank 25 of its 135 candidates)."""
    parts = [unit for unit in units if unit.kind in PART_KINDS and covering(unit) and not runs_at_import(unit)]
    made: dict[frozenset[str], Unit] = {}
    for chosen in [*_affinity_parts(parts, covering), *_reach_parts(parts, covering)]:
        keys = frozenset(part.key for part in chosen)
        if len(chosen) >= MIN_PARTS and keys not in made:
            made[keys] = group_unit(chosen)
    return list(made.values())


def _affinity_parts(parts: list[Unit], covering: Callable[[Unit], set[str]]) -> list[list[Unit]]:
    """Per (module, test group): the module's units whose covering tests are at least AFFINITY in the group, the
    largest MAX_PARTS."""
    members: dict[tuple[str, str], list[Unit]] = {}
    for unit in parts:
        tests = covering(unit)
        counts = Counter(group for test in tests for group in groups_of(test))
        for group, count in sorted(counts.items()):
            if count >= AFFINITY * len(tests):
                members.setdefault((unit.path, group), []).append(unit)
    return [
        sorted(units, key=lambda part: (-part.statements, part.key))[:MAX_PARTS] for _, units in sorted(members.items())
    ]


def _reach_parts(parts: list[Unit], covering: Callable[[Unit], set[str]]) -> list[list[Unit]]:
    """Per test group: the units it runs that at most SHARED of the suite runs, the fewest covering tests first (then
    the largest), MAX_PARTS of them."""
    suite = set().union(*(covering(unit) for unit in parts))
    reached: dict[str, list[Unit]] = {}
    for unit in parts:
        tests = covering(unit)
        if len(tests) > SHARED * len(suite):
            continue
        for group in sorted({group for test in tests for group in groups_of(test)}):
            reached.setdefault(group, []).append(unit)
    return [
        sorted(units, key=lambda part: (len(covering(part)), -part.statements, part.key))[:MAX_PARTS]
        for _, units in sorted(reached.items())
    ]


def group_unit(parts: list[Unit]) -> Unit:
    """The unit that deletes `parts` (functions or methods, of one module or several) together, in source order.

    Its path is its first part's; a part of another module is named with its path in the group's name."""
    ordered = sorted(parts, key=lambda part: (part.path, part.start_line))
    path = ordered[0].path
    name = "+".join(part.qualname if part.path == path else f"{_stem(part.path)}:{part.qualname}" for part in ordered)
    return joined_unit(path, name, GROUP_KIND, ordered, parts=tuple(ordered))


def narrowed(unit: Unit, dropped: Collection[str]) -> Unit | None:
    """A group without the parts named in `dropped` (`path::qualname`): a group of those left, the one left
    alone, or None when no part is left or none was dropped."""
    kept = [part for part in unit.parts if f"{part.path}::{part.qualname}" not in dropped]
    if not unit.parts or not kept or len(kept) == len(unit.parts):
        return None
    return group_unit(kept) if len(kept) > 1 else kept[0]


def _stem(path: str) -> str:
    return str(PurePosixPath(path).with_suffix(""))
