"""A host-built wheelhouse of a repository's dependencies, test extras and test tools (the only network use)."""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from task_synth.errors import SynthError

log = logging.getLogger(__name__)

TEST_TOOLS = ("pytest", "coverage", "setuptools>=68", "wheel")
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
METADATA_FILES = ("pyproject.toml", "setup.cfg", "setup.py", *REQUIREMENT_FILES)


def project_name(root: Path) -> str | None:
    """The distribution name from pyproject, setup.cfg or setup.py, normalised; None when unknown."""
    name = None
    if (root / "pyproject.toml").exists():
        name = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {}).get("name")
    for file, pattern in (("setup.cfg", r"^name\s*=\s*(\S+)"), ("setup.py", r"name\s*=\s*['\"]([^'\"]+)['\"]")):
        if not name and (root / file).exists():
            match = re.search(pattern, (root / file).read_text(errors="replace"), re.MULTILINE)
            name = match.group(1) if match else None
    return re.sub(r"[-_.]+", "_", name).lower() if name else None


def build_requirements(root: Path) -> list[str]:
    if (root / "pyproject.toml").exists():
        system = tomllib.loads((root / "pyproject.toml").read_text()).get("build-system", {})
        return list(system.get("requires", ["setuptools", "wheel"]))
    return ["setuptools", "wheel"]


def _extras(root: Path) -> list[str]:
    """The test extras the project declares (pip ignores none it knows, so a guess from setup.py is safe)."""
    declared: set[str] = set()
    if (root / "pyproject.toml").exists():
        declared |= set(tomllib.loads((root / "pyproject.toml").read_text()).get("project", {}).get("optional-dependencies", {}))
    for name in ("setup.cfg", "setup.py"):
        if (root / name).exists():
            declared |= set(re.findall(r"""["']?(\w+)["']?\s*[:=]\s*[\[\n]""", (root / name).read_text(errors="replace")))
    return [extra for extra in TEST_EXTRAS if extra in declared]


def wheelhouse_key(root: Path) -> str:
    digest = hashlib.sha256(f"{sys.version_info[:2]} {TEST_TOOLS}".encode())
    for name in METADATA_FILES:
        if (root / name).exists():
            digest.update(name.encode() + (root / name).read_bytes())
    return digest.hexdigest()[:16]


def build_wheelhouse(root: Path, cache_dir: Path, find_links: tuple[Path, ...] = (), offline: bool = False) -> Path:
    """Wheels of everything the repository needs to install and test, cached by its metadata.

    `find_links` are local wheel directories searched first; `offline` searches only them.
    """
    root = root.resolve()
    target = cache_dir / "wheelhouse" / wheelhouse_key(root)
    if target.is_dir():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    extras = _extras(root)
    spec = f"{root}[{','.join(extras)}]" if extras else str(root)
    command = [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(partial), spec, *TEST_TOOLS, *build_requirements(root)]
    command += [f"--find-links={path}" for path in find_links] + (["--no-index"] if offline else [])
    for name in REQUIREMENT_FILES:
        if (root / name).exists():
            command += ["-r", str(root / name)]
    log.info("building the wheelhouse: %s", " ".join(command[3:]))
    result = subprocess.run(command, capture_output=True, text=True, cwd=root)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        detail = next((line for line in lines if "ERROR" in line), lines[-1] if lines else "pip failed")
        raise SynthError(f"cannot resolve the dependencies of {root.name} ({detail.strip()}): fix the requirement or its index")
    own = project_name(root)
    for wheel in partial.glob("*.whl"):
        if own and wheel.name.split("-")[0].lower() == own:
            wheel.unlink()  # the project itself is installed editable in each workspace, never from a wheel
    partial.rename(target)
    return target
