"""Which installed distributions a task image drops: pip and what only the build needed, unless the tests need them.

pip, setuptools and wheel vendor copies of popular projects (six, packaging, more_itertools, jaraco.*), and a copy of
the project inside the image the agent sees is a leak of its deleted code. Tasks never run pip: the editable install's
files are captured once and written in as an archive.

Run inside the repo image with its venv's Python (`python build_tools.py BUILD_ONLY_FILE OWN_WHEELS_DIR`), it prints
the names to uninstall, one per line; it needs only the standard library and `packaging` (pip's copy if need be).
"""

from __future__ import annotations

import re
import sys
import zipfile
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import InvalidRequirement, Requirement
except ImportError:  # the venv may hold no packaging of its own; pip's is there until pip goes
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement  # type: ignore[no-redef, assignment]

# Always candidates: the installers themselves, which no test run needs.
INSTALLERS = ("pip", "setuptools", "wheel")
TEST_EXTRAS = ("test", "tests", "testing")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(lines: Iterable[str], extras: Iterable[str] = ()) -> set[str]:
    """The names of the requirements that apply here, with the given extras active; lines that are no requirement
    (blank, comments, pip options such as -r or --index-url) are skipped."""
    names = set()
    for line in lines:
        try:
            requirement = Requirement(line.partition(" #")[0].strip())
        except InvalidRequirement:
            continue
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            names.add(canonical(requirement.name))
    return names


def closure(roots: set[str], requires: Mapping[str, set[str]]) -> set[str]:
    """`roots` and everything they require, transitively, among the installed distributions."""
    seen: set[str] = set()
    todo = [name for name in roots if name in requires]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [needed for needed in requires.get(name, ()) if needed in requires and needed not in seen]
    return seen


def removable(requires: Mapping[str, set[str]], build_only: set[str], own_requires: set[str] | None) -> set[str]:
    """Installed distributions (name -> names it requires) that only the build and the installers need.

    `own_requires` is what the project itself requires with its test extras; None when unknown, and then only pip
    goes, since the project may import setuptools (pkg_resources) at run time.
    """
    if own_requires is None:
        return ({"pip"} & set(requires)) - closure(set(requires) - {"pip"}, requires)
    candidates = closure(build_only | set(INSTALLERS), requires)
    keep = closure((set(requires) - candidates) | own_requires, requires)
    return candidates - keep


def installed_requires() -> dict[str, set[str]]:
    return {
        canonical(dist.metadata["Name"]): requirement_names(dist.requires or ())
        for dist in metadata.distributions()
        if dist.metadata["Name"]
    }


def own_requirements(own_wheels: Path) -> set[str] | None:
    """What the project's own wheel requires, test extras included; None without the wheel."""
    for wheel in sorted(own_wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            name = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
            if name is None:
                continue
            text = archive.read(name).decode("utf-8", "replace")
        lines = [line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]
        return requirement_names(lines, TEST_EXTRAS)
    return None


def main(build_only_file: str, own_wheels: str) -> None:
    path = Path(build_only_file)
    build_only = {canonical(line) for line in path.read_text().split()} if path.is_file() else set()
    for name in sorted(removable(installed_requires(), build_only, own_requirements(Path(own_wheels)))):
        print(name)


if __name__ == "__main__":
    main(*sys.argv[1:3])
