"""Files a repository's build writes into its own source tree (a setuptools-scm, hatch-vcs or versioneer `_version.py`):
a clone has none, since git ignores them, yet the package imports them. The editable install writes them in the
install sandbox; they are copied from there into the checkout, so that every workspace made from it (the baseline's,
each task's, the one the canary scan reads) holds them, and they are never a deletion candidate."""

from __future__ import annotations

import configparser
import fnmatch
import logging
import re
import tomllib
from dataclasses import replace
from pathlib import Path, PurePosixPath

from sandbox import Sandbox
from sandbox.layout import WORKSPACE
from task_synth.repository.editable_install import INSTALL_MARK
from task_synth.repository.repo_layout import SKIPPED_DIRS, RepoLayout, read_layout
from task_synth.repository.source import CACHE_NAMES

log = logging.getLogger(__name__)

# Regular files under /workspace that the install wrote (newer than the mark): mode and path, NUL-separated.
_CREATED = f"find . -path ./.git -prune -o -type f -newer {INSTALL_MARK} -printf '%m %P\\0'"
# setup.py's `use_scm_version={"write_to": "pkg/_version.py"}` (or version_file), read without running setup.py.
_SETUP_PY_VERSION_FILE = re.compile(r"""["'](?:write_to|version_file)["']\s*:\s*["']([^"']+)["']""")


def declared_version_files(root: Path) -> set[str]:
    """The version files the build configuration names (setuptools-scm's `version_file`/`write_to`, hatch-vcs's
    `version-file`, versioneer's `versionfile_source`), as paths relative to `root`."""
    named: list[object] = []
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            tool = tomllib.loads(pyproject.read_text(encoding="utf-8", errors="replace")).get("tool", {})
        except tomllib.TOMLDecodeError:
            tool = {}
        scm = tool.get("setuptools_scm", {})
        named += [scm.get("version_file"), scm.get("write_to")]
        named.append(tool.get("hatch", {}).get("build", {}).get("hooks", {}).get("vcs", {}).get("version-file"))
        named.append(tool.get("versioneer", {}).get("versionfile_source"))
    setup_cfg = root / "setup.cfg"
    if setup_cfg.is_file():
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(setup_cfg.read_text(encoding="utf-8", errors="replace"))
            named.append(parser.get("versioneer", "versionfile_source", fallback=None))
        except configparser.Error:
            pass
    if (root / "setup.py").is_file():
        named += _SETUP_PY_VERSION_FILE.findall((root / "setup.py").read_text(encoding="utf-8", errors="replace"))
    return {PurePosixPath(path).as_posix() for path in named if isinstance(path, str) and path.strip()}


def _is_build_output(path: str) -> bool:
    """Whether a path lies in a build or tool directory or a cache (build/, *.egg-info, __pycache__)."""
    parts = PurePosixPath(path).parts
    return any(part in SKIPPED_DIRS for part in parts[:-1]) or any(
        fnmatch.fnmatch(part, pattern) for part in parts for pattern in CACHE_NAMES
    )


def generated_paths(created: list[str], layout: RepoLayout) -> list[str]:
    """Of the files the install created (paths under the workspace), those the checkout lacks that sit beside the
    package's modules or are a declared version file; build directories, caches and metadata are left out."""
    module_dirs = {PurePosixPath(path).parent for path in layout.modules}
    declared = declared_version_files(layout.root)
    return sorted(
        path
        for path in created
        if not (layout.root / path).exists()
        and not _is_build_output(path)
        and (PurePosixPath(path).parent in module_dirs or path in declared)
    )


def copy_generated(sb: Sandbox, layout: RepoLayout) -> RepoLayout:
    """Copy what the editable install wrote into the source tree of `sb`'s /workspace into the checkout, and return the
    checkout's layout with them and the declared version files marked generated."""
    listed = sb.exec(_CREATED, timeout=120, cwd=WORKSPACE)
    if listed.exit_code != 0:
        raise RuntimeError(f"could not list the files the editable install wrote: {listed.stderr.strip()[-300:]}")
    modes = {path: mode for mode, _, path in (entry.partition(" ") for entry in listed.stdout.split("\0")) if path}
    copied = generated_paths(list(modes), layout)
    for path in copied:
        target = layout.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(sb.read_file(f"{WORKSPACE}/{path}"))
        target.chmod(int(modes[path], 8) & 0o755 | 0o644)
    if copied:
        log.info("the editable install generated %s: copied into every workspace, never deleted", ", ".join(copied))
    generated = frozenset(copied) | declared_version_files(layout.root)
    return replace(read_layout(layout.root), generated=generated) if copied else replace(layout, generated=generated)
