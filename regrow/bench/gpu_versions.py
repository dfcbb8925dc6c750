"""The versions of torch, transformers, trl, peft and accelerate regrow's trainer was written for, held against a box's
before `regrow bench gpu` measures anything (on a box where regrow is not installed, deploy/gpu-check/run.sh)."""

from __future__ import annotations

from importlib import metadata
from typing import Any

# pyproject.toml's `train` extra, kept here for a box where regrow is not installed (deploy/gpu-check/run.sh); a test
# holds the two equal
NEEDED_VERSIONS = {
    "torch": ">=2.4",
    "transformers": "==5.23.0",
    "trl": "==1.16.0",
    "peft": "==0.21.2",
    "accelerate": "==1.16.0",
}


def version_ok(found: str | None, needed: str) -> bool:
    """Whether version `found` (None: not installed) meets the requirement `needed` (`==5.23.0`, `>=2.4`)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if found is None:
        return False
    try:
        return SpecifierSet(needed).contains(Version(found), prereleases=True)
    except InvalidVersion:
        return False


def checked_versions() -> dict[str, dict[str, Any]]:
    """Each package the trainer's step depends on: the version found here, the one needed, and whether it meets it."""
    checked = {}
    for name, needed in NEEDED_VERSIONS.items():
        try:
            found: str | None = metadata.version(name)
        except metadata.PackageNotFoundError:
            found = None
        checked[name] = {"found": found, "needed": needed, "ok": version_ok(found, needed)}
    return checked


def version_mismatches(versions: dict[str, dict[str, Any]]) -> list[str]:
    """What to do about each package whose version the trainer was not written for."""
    return [
        f"{name} {check['found'] or 'is not installed'}, and regrow's trainer needs {name}{check['needed']}: install "
        f"that (pip install '{name}{check['needed']}', or carry its wheel), or pass --ignore-versions to measure anyway"
        for name, check in versions.items()
        if not check["ok"]
    ]
