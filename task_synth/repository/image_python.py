"""The Python of the image the tests run in, and the wheels a host-built wheelhouse holds that it cannot install.

The wheelhouse is resolved by the host's pip, which checks `Requires-Python` against the host's interpreter. The base
image has its own (Debian's 3.11.2 beside a host's 3.11.7, say), so a dependency that dropped the image's patch release
(soupsieve 4 asks for >=3.11.5) resolves on the host and then fails the image build. Each such wheel is pinned to the
newest release the image's Python accepts, and the wheelhouse is resolved again.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sandbox import DockerBackend, SandboxError
from task_synth.errors import SynthError

log = logging.getLogger(__name__)
VERSION_PROBE = "import platform; print(platform.python_version())"


def image_python_version(backend: DockerBackend, image: str, cache_dir: Path) -> str | None:
    """The full Python version of `image` (cached by its tag, which names its revision), or None when it cannot be
    read: the check is then skipped."""
    cache = cache_dir / "image-python.json"
    try:
        known = json.loads(cache.read_text()) if cache.is_file() else {}
    except ValueError:
        known = {}
    if image in known:
        return known[image]
    try:
        with backend.create(image) as sb:
            result = sb.exec(["python3", "-c", VERSION_PROBE], timeout=30)
    except SandboxError as error:
        log.warning("cannot read the Python version of %s (%s): wheels are not checked against it", image, error)
        return None
    version = result.stdout.strip()
    if result.exit_code != 0 or not re.fullmatch(r"\d+\.\d+\.\d+", version):
        log.warning("%s did not say its Python version (%s): wheels are not checked against it", image, result.stderr)
        return None
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(known | {image: version}))
    return version


def wheel_requires_python(wheel: Path) -> tuple[str, str, str | None]:
    """(name, version, Requires-Python or None) from a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        metadata_name = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        metadata = archive.read(metadata_name).decode(errors="replace").split("\n\n", 1)[0]
    fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*?)\s*$", metadata, re.MULTILINE))
    return fields.get("Name", wheel.name.split("-")[0]), fields.get("Version", ""), fields.get("Requires-Python")


def incompatible_wheels(wheelhouse: Path, python_version: str) -> dict[str, str]:
    """name -> `version (Requires-Python)` for each wheel whose Requires-Python excludes `python_version`."""
    found = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name, version, requires = wheel_requires_python(wheel)
        try:
            if requires and not SpecifierSet(requires).contains(Version(python_version), prereleases=True):
                found[name] = f"{version} (Requires-Python {requires})"
        except (InvalidSpecifier, InvalidVersion):
            log.warning("%s has an unreadable Requires-Python %r: not checked", wheel.name, requires)
    return found


def newest_accepted(
    name: str, python_version: str, find_links: tuple[Path, ...] = (), offline: bool = False
) -> str | None:
    """The newest release of `name` that publishes a wheel `python_version` may install, or None when none does."""
    with tempfile.TemporaryDirectory(prefix="regrow-python-pin-") as scratch:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            f"--python-version={python_version}",
            "-d",
            scratch,
            name,
        ]
        command += [f"--find-links={path}" for path in find_links] + (["--no-index"] if offline else [])
        result = subprocess.run(command, capture_output=True, text=True)
        wheels = list(Path(scratch).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            return None
        return wheel_requires_python(wheels[0])[1] or None


def pins_for(wheelhouse: Path, python_version: str, find_links: tuple[Path, ...], offline: bool) -> list[str]:
    """`name<=version` for each wheel the image's Python cannot install; SynthError when a package has no release
    it can."""
    pins = []
    for name, found in incompatible_wheels(wheelhouse, python_version).items():
        accepted = newest_accepted(name, python_version, find_links, offline)
        if accepted is None:
            raise SynthError(
                f"{name} {found} has no release that the image's Python {python_version} can install: build the base "
                "image from a newer Python (BASE_IMAGE) or pin an older release of what needs it"
            )
        log.info("%s %s: pinned to %s for the image's Python %s", name, found, accepted, python_version)
        pins.append(f"{name}<={accepted}")
    return pins
