"""Test requirements a project declares outside its extras and requirements files: PEP 735 dependency groups,
Poetry's dev groups and tox's `[testenv] deps`. Each is read as written; pip resolves them with the rest."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

# Groups whose names say they hold what the tests need (PEP 735 normalizes names as package names).
TEST_GROUPS = ("test", "tests", "testing", "dev")
# A tox factor condition before a requirement (`py311: foo`, `!pypy: bar`): it names an env other than the plain one.
_FACTOR = re.compile(r"^[\w!.,-]+:\s+")
# A requirement that names where to fetch it (a VCS or URL), which an offline or registry-only build cannot reach.
_DIRECT = re.compile(r"(^|\s|@\s*)(git\+|hg\+|svn\+|bzr\+|https?://|file:)")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_groups(pyproject: dict) -> list[str]:
    """The requirements of the test groups of `[dependency-groups]`, `{include-group = ...}` followed."""
    groups = {_normalized(name): entries for name, entries in pyproject.get("dependency-groups", {}).items()}
    found: list[str] = []

    def add(name: str, seen: tuple[str, ...]) -> None:
        for entry in groups.get(name, []):
            if isinstance(entry, str):
                found.append(entry)
            elif isinstance(entry, dict) and "include-group" in entry:
                included = _normalized(str(entry["include-group"]))
                if included not in seen:  # a cycle is the project's error; reading it must not loop
                    add(included, (*seen, included))

    for name in TEST_GROUPS:
        add(name, (name,))
    return list(dict.fromkeys(found))


def poetry_groups(pyproject: dict) -> list[str]:
    """Poetry's dev-dependencies and test groups, as requirement names with the constraints pip can read."""
    poetry = pyproject.get("tool", {}).get("poetry", {})
    tables = [poetry.get("dev-dependencies", {})]
    tables += [poetry.get("group", {}).get(name, {}).get("dependencies", {}) for name in TEST_GROUPS]
    found = []
    for table in tables:
        for name, constraint in table.items():
            if _normalized(name) == "python":
                continue
            # `^1.2` and `~1.2` are Poetry's own: the name alone lets pip pick a version the rest agrees with.
            version = constraint if isinstance(constraint, str) and constraint[:1] in "<>=!" else ""
            found.append(f"{name}{version}")
    return list(dict.fromkeys(found))


def tox_deps(root: Path) -> tuple[list[str], list[Path]]:
    """tox.ini's `[testenv] deps`: requirements, and the requirements files it names with `-r`."""
    path = root / "tox.ini"
    if not path.is_file():
        return [], []
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(path.read_text(errors="replace"))
    except configparser.Error:
        return [], []
    lines = parser.get("testenv", "deps", fallback="").splitlines()
    requirements, files = [], []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if (
            not line
            or _FACTOR.match(line)
            or _DIRECT.search(line)
            or "{[" in line
            or line.startswith(("-c", "-e", "."))
        ):
            continue  # blank, another env's, a URL, another section's list, constraints, or the project itself
        if line.startswith("-r"):
            named = root / line[2:].strip().replace("{toxinidir}/", "").replace("{toxinidir}", "")
            if named.is_file():
                files.append(named)
            continue
        requirements.append(line.replace("{toxinidir}", str(root)))
    return requirements, files


def declared_test_deps(root: Path) -> tuple[list[str], list[Path]]:
    """Every test requirement the project declares in these places, and the requirements files tox names."""
    requirements: list[str] = []
    if (root / "pyproject.toml").is_file():
        try:
            pyproject = tomllib.loads((root / "pyproject.toml").read_text())
        except tomllib.TOMLDecodeError:
            pyproject = {}
        requirements += dependency_groups(pyproject) + poetry_groups(pyproject)
    from_tox, files = tox_deps(root)
    kept = [requirement for requirement in requirements + from_tox if not _DIRECT.search(requirement)]
    return list(dict.fromkeys(kept)), files
