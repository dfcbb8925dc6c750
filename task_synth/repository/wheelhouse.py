"""A host-built wheelhouse of a repository's dependencies, test extras and test tools (the only network use)."""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from pyproject_hooks import BuildBackendHookCaller, quiet_subprocess_runner

from task_synth.errors import SynthError
from task_synth.repository.build_tools import requirement_names
from task_synth.repository.declared_test_deps import declared_test_deps
from task_synth.repository.image_python import pins_for, wheel_requires_python
from task_synth.repository.pytest_compat import pytest_requirement

log = logging.getLogger(__name__)

# pytest itself comes first, capped for a repository whose conftests need it (pytest_compat).
# setuptools and wheel only when the build asks for them: setuptools vendors more_itertools, jaraco.* and packaging,
# and a copy of a project in the image is a leak of its deleted code.
TEST_TOOLS = ("coverage",)
# Bump when what a wheelhouse holds changes, so that cached ones are rebuilt (2: the backend's editable requirements,
# 3: the project's own wheel kept in OWN_WHEELS, found by its PKG-INFO or poetry name too,
# 4: editable requirements resolved with the build table, 5: setuptools and wheel only for builds that need them,
# 6: BUILD_ONLY written, for the task image to drop, 7: test deps from dependency groups, Poetry groups and tox,
# 8: setuptools below 82 unless the build asks for more).
WHEELHOUSE_FORMAT = 8
# The project's own wheel, apart: a test dependency may require the project (freezegun needs python-dateutil), so pip
# must find it, but the repo image uninstalls it again, since each workspace installs the project editable.
OWN_WHEELS = "own"
# The names only the build asked for (not the project, its tests or a requirements file): the task image drops them.
BUILD_ONLY = "build-only.txt"
# PEP 517's fallback for a project without a [build-system] table.
LEGACY_BUILD_SYSTEM = (["setuptools", "wheel"], "setuptools.build_meta:__legacy__")
# setuptools 82 dropped pkg_resources, which old setup.py files and the setuptools plugins a test suite pins (pbr
# 5.11, wcwidth's) still import while the project builds: a build that allows an older setuptools gets one, where the
# index has it (offline, or when the rest needs a newer one, the wheels at hand decide).
PKG_RESOURCES_CAP = "setuptools<82"
TEST_EXTRAS = ("test", "tests", "testing")
REQUIREMENT_FILES = (
    "requirements.txt",
    "requirements-test.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "requirements/test.txt",
    "requirements-dev.txt",
    "dev-requirements.txt",
)
# A pin can pull in an older dependency that has its own floor; each round pins what the last one brought.
MAX_PIN_ROUNDS = 4
# The pins, kept in the wheelhouse as the record of what was held back for the image's Python.
PINS_FILE = "python-pins.txt"
METADATA_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "tox.ini", *REQUIREMENT_FILES)


def project_name(root: Path) -> str | None:
    """The distribution name from an sdist's PKG-INFO, pyproject ([project] or poetry's), setup.cfg or setup.py,
    normalised; None when unknown."""
    name = None
    if (root / "PKG-INFO").exists():
        match = re.search(r"^Name:\s*(\S+)", (root / "PKG-INFO").read_text(errors="replace"), re.MULTILINE)
        name = match.group(1) if match else None
    if not name and (root / "pyproject.toml").exists():
        pyproject = tomllib.loads((root / "pyproject.toml").read_text())
        name = pyproject.get("project", {}).get("name") or pyproject.get("tool", {}).get("poetry", {}).get("name")
    for file, pattern in (("setup.cfg", r"^name\s*=\s*(\S+)"), ("setup.py", r"name\s*=\s*['\"]([^'\"]+)['\"]")):
        if not name and (root / file).exists():
            match = re.search(pattern, (root / file).read_text(errors="replace"), re.MULTILINE)
            name = match.group(1) if match else None
    return re.sub(r"[-_.]+", "_", name).lower() if name else None


@dataclass(frozen=True)
class BuildSystem:
    """The project's [build-system] table: what the backend needs, and the backend itself."""

    requires: list[str]
    backend: str
    backend_path: list[str] | None = None


def build_system(root: Path) -> BuildSystem:
    table = (
        tomllib.loads((root / "pyproject.toml").read_text()).get("build-system", {})
        if (root / "pyproject.toml").exists()
        else {}
    )
    requires, backend = LEGACY_BUILD_SYSTEM
    return BuildSystem(
        list(table.get("requires", requires)), table.get("build-backend", backend), table.get("backend-path")
    )


def pkg_resources_cap(requires: list[str]) -> list[str]:
    """[PKG_RESOURCES_CAP] where build `requires` ask for setuptools and accept a release before 82, else []."""
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.name.lower() == "setuptools" and requirement.specifier.contains("81.0.0", prereleases=True):
            return [PKG_RESOURCES_CAP]
    return []


def editable_requirements(root: Path, wheels: Path) -> list[str]:
    """What the backend asks for to build `root` editable (hatchling: `editables`), asked in a venv of only its build
    requirements.

    The build requirements come from `wheels`, where `pip wheel` has already put them.
    """
    system = build_system(root)
    with tempfile.TemporaryDirectory(prefix="regrow-build-env-") as env:
        python = str(Path(env) / "bin" / "python")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", env], check=True, capture_output=True)
        install = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            f"--find-links={wheels}",
            *system.requires,
        ]
        installed = subprocess.run(install, capture_output=True, text=True) if system.requires else None
        if installed and installed.returncode != 0:
            raise SynthError(
                f"cannot install the build requirements of {root.name} ({_pip_error(installed.stderr)}): "
                "check [build-system] requires in its pyproject.toml"
            )
        caller = BuildBackendHookCaller(str(root), system.backend, system.backend_path, quiet_subprocess_runner, python)
        try:
            # pyproject_hooks re-raises the backend's warnings here, where Python would print them over the progress.
            with warnings.catch_warnings(record=True) as raised:
                warnings.simplefilter("always")
                needed = list(caller.get_requires_for_build_editable())
            for warning in raised:
                log.debug("the build backend of %s warns: %s", root.name, warning.message)
            return needed
        except subprocess.CalledProcessError as error:
            lines = [line for line in error.output.decode(errors="replace").splitlines() if line.strip()] or [
                "no output"
            ]
            raise SynthError(
                f"the build backend {system.backend} of {root.name} fails to say what an editable build needs "
                f"({lines[-1].strip()}): check its build configuration"
            ) from None


def _pip_error(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return next((line for line in lines if "ERROR" in line), lines[-1] if lines else "pip failed").strip()


def _pip_wheel(root: Path, target: Path, arguments: list[str], find_links: tuple[Path, ...], offline: bool) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(target), *arguments]
    command += [f"--find-links={path}" for path in find_links] + (["--no-index"] if offline else [])
    log.info("building the wheelhouse: %s", " ".join(command[3:]))
    result = subprocess.run(command, capture_output=True, text=True, cwd=root)
    if result.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        raise SynthError(
            f"cannot resolve the dependencies of {root.name} ({_pip_error(result.stderr)}): fix the requirement or its "
            "index"
        )


def _pip_wheel_for(
    root: Path,
    target: Path,
    arguments: list[str],
    find_links: tuple[Path, ...],
    offline: bool,
    python_version: str | None,
    pins: list[str],
) -> None:
    """`_pip_wheel`, then again with `pins` grown until every wheel in `target` installs on `python_version`."""
    for _ in range(MAX_PIN_ROUNDS):
        constraints: list[str] = []
        if pins:
            target.mkdir(parents=True, exist_ok=True)
            (target / PINS_FILE).write_text("".join(f"{pin}\n" for pin in pins))
            constraints = ["-c", str(target / PINS_FILE)]
        _pip_wheel(root, target, [*arguments, *constraints], find_links, offline)
        if python_version is None:
            return
        more = pins_for(target, python_version, find_links, offline)
        if not more:
            return
        pins += more
        for wheel in target.glob("*.whl"):  # the pinned-back releases replace them; the rest is cached by pip
            if wheel_requires_python(wheel)[0] in {pin.split("<=")[0] for pin in more}:
                wheel.unlink()
    raise SynthError(
        f"the dependencies of {root.name} still need a newer Python than the image's {python_version} after "
        f"{MAX_PIN_ROUNDS} rounds of pins ({', '.join(pins)}): build the base image from a newer Python (BASE_IMAGE)"
    )


def _extras(root: Path) -> list[str]:
    """The test extras the project declares (pip ignores none it knows, so a guess from setup.py is safe)."""
    declared: set[str] = set()
    if (root / "pyproject.toml").exists():
        declared |= set(
            tomllib.loads((root / "pyproject.toml").read_text()).get("project", {}).get("optional-dependencies", {})
        )
    for name in ("setup.cfg", "setup.py"):
        if (root / name).exists():
            declared |= set(
                re.findall(r"""["']?(\w+)["']?\s*[:=]\s*[\[\n]""", (root / name).read_text(errors="replace"))
            )
    return [extra for extra in TEST_EXTRAS if extra in declared]


def suite_tools(root: Path) -> list[str]:
    """What every repository image carries to run and measure the tests."""
    return [pytest_requirement(root), *TEST_TOOLS]


def wheelhouse_key(root: Path, python_version: str | None = None) -> str:
    python = python_version or sys.version_info[:2]
    digest = hashlib.sha256(f"{python} {suite_tools(root)} {WHEELHOUSE_FORMAT}".encode())
    for name in METADATA_FILES:
        if (root / name).exists():
            digest.update(name.encode() + (root / name).read_bytes())
    return digest.hexdigest()[:16]


def build_wheelhouse(
    root: Path,
    cache_dir: Path,
    find_links: tuple[Path, ...] = (),
    offline: bool = False,
    python_version: str | None = None,
) -> Path:
    """Wheels of everything the repository needs to install and test, cached by its metadata.

    `find_links` are local wheel directories searched first; `offline` searches only them. `python_version` is the
    image's Python: a wheel whose Requires-Python excludes it is pinned back to a release it accepts.
    """
    root = root.resolve()
    target = cache_dir / "wheelhouse" / wheelhouse_key(root, python_version)
    if target.is_dir():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    extras = _extras(root)
    spec = f"{root}[{','.join(extras)}]" if extras else str(root)
    arguments = [spec, *suite_tools(root), *build_system(root).requires]
    for name in REQUIREMENT_FILES:
        if (root / name).exists():
            arguments += ["-r", str(root / name)]
    declared, files = declared_test_deps(root)
    guessed = [*declared, *(word for path in files for word in ("-r", str(path)))]
    pins: list[str] = []
    cap = [] if offline else pkg_resources_cap(build_system(root).requires)

    def resolve(wanted: list[str], links: tuple[Path, ...]) -> None:
        nonlocal cap
        try:
            _pip_wheel_for(root, partial, [*wanted, *cap], links, offline, python_version, pins)
        except SynthError as error:
            if not cap:
                raise
            log.warning("resolving without %s, which the rest does not allow: %s", PKG_RESOURCES_CAP, error)
            cap = []
            _pip_wheel_for(root, partial, wanted, links, offline, python_version, pins)

    try:
        resolve([*arguments, *guessed], find_links)
    except SynthError as error:
        if not guessed:
            raise
        # Read from dependency groups and tox.ini, they are a guess at what the tests need: the project comes first.
        log.warning("building the wheelhouse without %s, which did not resolve: %s", " ".join(guessed), error)
        shutil.rmtree(partial, ignore_errors=True)
        resolve(arguments, find_links)
    try:
        editable = editable_requirements(root, partial)
    except SynthError:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if editable:
        # With the build requirements, so that an unpinned `setuptools_scm` meets the build table's `setuptools_scm<8`
        # instead of adding a second, conflicting version that the repo image cannot install.
        resolve([*editable, *build_system(root).requires], (partial, *find_links))
    set_aside_own_wheels(partial, project_name(root))
    (partial / BUILD_ONLY).write_text("".join(f"{name}\n" for name in sorted(build_only(root, editable))))
    partial.rename(target)
    return target


def build_only(root: Path, editable: list[str]) -> set[str]:
    """The build's requirements (and the backend's editable ones) that no requirements file also asks for."""
    declared, files = declared_test_deps(root)
    asked = requirement_names(declared)
    for path in [root / name for name in REQUIREMENT_FILES if (root / name).exists()] + files:
        asked |= requirement_names(path.read_text(errors="replace").splitlines())
    return requirement_names([*build_system(root).requires, *editable]) - asked - requirement_names(suite_tools(root))


def set_aside_own_wheels(wheelhouse: Path, own: str | None) -> list[Path]:
    """Move the project's own wheels into `OWN_WHEELS/`, where pip finds them only when a dependency asks."""
    moved = []
    for wheel in wheelhouse.glob("*.whl"):
        if own and re.sub(r"[-_.]+", "_", wheel.name.split("-")[0]).lower() == own:
            (wheelhouse / OWN_WHEELS).mkdir(exist_ok=True)
            moved.append(wheel.rename(wheelhouse / OWN_WHEELS / wheel.name))
    return moved
