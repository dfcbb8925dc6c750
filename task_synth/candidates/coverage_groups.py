"""Multi-unit features: the functions and methods of one module that a group of tests reaches, found by coverage and
deleted together (FeatureBench's idea). A group of tests is a test file, class or function; a unit belongs to a group's
feature when most of the tests that run it are in that group, so shared utilities stay out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from task_synth.candidates.units import Unit, joined_unit

GROUP_KIND = "group"
MIN_PARTS = 2
# More parts than this make a task that is a rewrite of the module, not a feature.
MAX_PARTS = 6
# The share of a unit's covering tests that must sit in the group for the unit to be part of its feature.
AFFINITY = 0.5
PART_KINDS = ("function", "method")


def groups_of(node_id: str) -> list[str]:
    """The groups a test belongs to: its file, its class (for a test in one) and its test function (all its
    parameters)."""
    path, _, rest = node_id.partition("::")
    parts = rest.split("[", 1)[0].split("::")
    groups = [path, *("::".join([path, *parts[: depth + 1]]) for depth in range(len(parts)))]
    return list(dict.fromkeys(groups))


def coverage_groups(units: list[Unit], covering: Callable[[Unit], set[str]]) -> list[Unit]:
    """One group unit per (module, test group) whose feature has at least MIN_PARTS functions or methods, in a
    stable order; a set of parts that two groups share is made once."""
    members: dict[tuple[str, str], list[Unit]] = {}
    for unit in units:
        if unit.kind not in PART_KINDS:
            continue
        tests = covering(unit)
        if not tests:
            continue
        counts = Counter(group for test in tests for group in groups_of(test))
        for group, count in sorted(counts.items()):
            if count >= AFFINITY * len(tests):
                members.setdefault((unit.path, group), []).append(unit)
    made: dict[frozenset[str], Unit] = {}
    for (path, _), parts in sorted(members.items()):
        if len(parts) < MIN_PARTS:
            continue
        chosen = sorted(parts, key=lambda part: (-part.statements, part.key))[:MAX_PARTS]
        chosen.sort(key=lambda part: part.start_line)
        keys = frozenset(part.key for part in chosen)
        if keys not in made:
            made[keys] = group_unit(path, chosen)
    return list(made.values())


def group_unit(path: str, parts: list[Unit]) -> Unit:
    """The unit that deletes `parts` (functions or methods of the module at `path`) together."""
    return joined_unit(path, "+".join(part.qualname for part in parts), GROUP_KIND, parts, parts=tuple(parts))
