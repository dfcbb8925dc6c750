"""The version a clone's build backend would read from git, for builds that cannot see the history.

The checkout is a copy without `.git` (source.py), and an sdist's `PKG-INFO` is what setuptools-scm, hatch-vcs and
pdm-backend fall back to when there is no history. A clone has neither, so a project that takes its version from git
fails to build (`unable to detect version`). Its version is read from the clone's tags instead and handed on: to the
host's wheel build as a `PKG-INFO` in the scratch copy it builds from, and to the sandbox's editable install as the
backends' own override variables, so nothing is added to the workspace the agent sees.
"""

from __future__ import annotations

import re
from pathlib import Path

import git
from packaging.version import InvalidVersion, Version

# What a clone with no tag that reads as a version is built as: setuptools-scm's own default starts at 0.1.dev.
UNTAGGED_VERSION = "0.0.0"
_NUMBERS = re.compile(r"\d+(\.\d+)*")
_GIT_READERS = re.compile(r"\s*(setuptools[-_]scm|hatch[-_]vcs|versioningit|pdm[-_]backend)\b", re.IGNORECASE)


def described_version(repo: git.Repo) -> str:
    """The PEP 440 version of the newest tag reachable from HEAD (`v1.2.3`, `release-1.2`), or UNTAGGED_VERSION."""
    try:
        tag = repo.git.describe("--tags", "--abbrev=0")
    except git.GitCommandError:
        return UNTAGGED_VERSION
    for text in (tag.removeprefix("v"), *(match.group(0) for match in _NUMBERS.finditer(tag))):
        try:
            return str(Version(text))
        except InvalidVersion:
            continue
    return UNTAGGED_VERSION


def version_env(root: Path, version: str | None) -> dict[str, str]:
    """The variables that make setuptools-scm (hatch-vcs too) and pdm-backend build `root` as `version`; none for a
    source that carries its version (an sdist's PKG-INFO) or had no git history to read."""
    if version is None or (root / "PKG-INFO").is_file():
        return {}
    return {"SETUPTOOLS_SCM_PRETEND_VERSION": version, "PDM_BUILD_SCM_VERSION": version}


def write_pkg_info(root: Path, name: str | None, version: str | None, build_requires: list[str]) -> None:
    """Give a scratch copy of a clone whose build reads git (setuptools-scm, hatch-vcs, versioningit, pdm-backend)
    the PKG-INFO the backends fall back to without history (see version_env)."""
    reads_git = any(_GIT_READERS.match(requirement) for requirement in build_requires)
    if reads_git and name and version_env(root, version):
        (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
