"""A local path, an sdist or a git URL, checked out into a scratch directory at one commit (gitpython)."""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import git

from sandbox.archive_extraction import UnsafeArchive, extract_archive
from sandbox.layout import CACHE_NAMES as LEFT_BY_TOOLS
from task_synth.errors import SynthError
from task_synth.repository.repo_layout import SKIPPED_DIRS
from task_synth.repository.scm_version import described_version

CACHE_NAMES = (*LEFT_BY_TOOLS, "*.egg-info")


@dataclass(frozen=True)
class Checkout:
    """A clean copy of the source (no .git, no caches) and the commit it stands for."""

    root: Path
    repo_name: str
    commit: str
    scm_version: str | None = None  # a clone's version from its tags, for backends that read git (scm_version.py)


def _is_url(source: str) -> bool:
    return "://" in source or re.match(r"^[\w.-]+@[\w.-]+:", source) is not None


def _content_digest(root: Path) -> str:
    """A stable 40-hex id for a directory that is not a git repository."""
    digest = hashlib.sha1()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _copy_clean(source: Path, destination: Path) -> None:
    ignore = shutil.ignore_patterns(*CACHE_NAMES, *SKIPPED_DIRS - {"docs", "doc"})
    shutil.copytree(source, destination, ignore=ignore, symlinks=True)


def checkout(source: str, ref: str | None, scratch: Path) -> Checkout:
    """Clone or copy `source` into `scratch/src` at `ref`; raises SynthError with a remedy."""
    destination = scratch / "src"
    if _is_url(source) or (Path(source).is_dir() and (Path(source) / ".git").exists()):
        name = re.sub(r"\.git$", "", source.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1])
        clone_dir = scratch / "clone"
        try:
            repo = git.Repo.clone_from(source, clone_dir)
            if ref:
                repo.git.checkout(ref)
        except git.GitCommandError as error:
            detail = (error.stderr or str(error)).strip().splitlines()[-1]
            raise SynthError(
                f"cannot clone {source} at {ref or 'HEAD'} ({detail}): check the URL or path and --ref"
            ) from error
        commit = repo.head.commit.hexsha
        version = described_version(repo)
        _copy_clean(clone_dir, destination)
        shutil.rmtree(clone_dir)
        return Checkout(destination, name, commit, version)
    require_source(source)
    path = Path(source)
    if ref:
        raise SynthError(f"--ref {ref} needs a git repository, but {source} is not one: drop --ref or pass a clone")
    if is_sdist(source):
        path = extract_sdist(path, scratch / "sdist")
    _copy_clean(path, destination)
    return Checkout(destination, path.resolve().name, _content_digest(destination))


def is_sdist(source: str) -> bool:
    return source.endswith((".tar.gz", ".zip")) and Path(source).is_file()


def require_source(source: str) -> None:
    """SynthError unless `source` is a git URL, an existing directory or an sdist: checked before anything slow
    starts."""
    if not _is_url(source) and not Path(source).is_dir() and not is_sdist(source):
        raise SynthError(
            f"source {source} does not exist or is not a directory: pass a repository path, an sdist (.tar.gz or "
            ".zip) or a git URL"
        )


def extract_sdist(archive: Path, destination: Path) -> Path:
    """Unpack an sdist into `destination` and return its one top directory; a member that would land outside it is
    refused before anything is written."""
    try:
        extract_archive(archive, destination, label=archive.name)
    except UnsafeArchive as error:
        raise SynthError(f"{error}: refused, and nothing was unpacked; get the sdist from its project") from error
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as error:
        detail = " ".join(str(error).split())[:200]  # tarfile's error lists each compression it tried, a line each
        raise SynthError(f"{archive} cannot be unpacked ({detail}): download the sdist again") from error
    tops = [path for path in destination.iterdir() if path.is_dir()]
    if len(tops) != 1:
        raise SynthError(f"{archive.name} does not unpack into one directory: not a standard sdist")
    return tops[0]
