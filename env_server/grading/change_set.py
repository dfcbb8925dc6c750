"""A submission as an explicit change set: the agent's tree, read through the engine, compared file by file with the
task's.

No patch text is parsed and no git runs: both trees come out of containers as tar streams and are compared here.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

from env_server.grading.path_policy import PathPolicy
from sandbox.layout import AGENT_UID, CACHE_NAMES

# Never graded and never compared: version control and the caches tools leave behind.
SKIPPED_DIRS = frozenset({".git", *(name for name in CACHE_NAMES if "*" not in name and name != ".coverage")})
SKIPPED_SUFFIXES = tuple(name[1:] for name in CACHE_NAMES if name.startswith("*."))
SKIPPED_FILES = frozenset({".coverage"})


class SubmissionTooLarge(Exception):
    """The submitted tree is over a limit; the message says which."""


@dataclass(frozen=True)
class Entry:
    """One path of a tree: its kind, whether it is executable, and a digest of its content (a link's target)."""

    kind: str  # "file", "dir", "link" or "other"
    executable: bool = False
    digest: str = ""
    size: int = 0


@dataclass
class Tree:
    """The paths of a tree and the bytes of the files the caller asked to keep."""

    entries: dict[str, Entry] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)

    def files(self) -> set[str]:
        return {path for path, entry in self.entries.items() if entry.kind != "dir"}


@dataclass
class ChangeSet:
    """What the grader writes (added or modified files), deletes, and refuses with a reason."""

    written: dict[str, bytes] = field(default_factory=dict)
    executable: set[str] = field(default_factory=set)
    deleted: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def skipped(path: str) -> bool:
    parts = path.split("/")
    return (
        any(part in SKIPPED_DIRS for part in parts)
        or parts[-1].endswith(SKIPPED_SUFFIXES)
        or parts[-1] in SKIPPED_FILES
    )


class _ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks, for tarfile's streaming mode."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:  # type: ignore[override]
        while not self._buffer:
            self._buffer = next(self._chunks, b"")
            if not self._buffer:
                return 0
        size = min(len(target), len(self._buffer))
        target[:size], self._buffer = self._buffer[:size], self._buffer[size:]
        return size


def read_tree(
    chunks: Iterable[bytes],
    keep: Callable[[str, Entry], bool] | None = None,
    file_cap: int = 5 * 1024 * 1024,
    max_entries: int = 100_000,
) -> Tree:
    """Parse a tar stream of one directory (as the engine's archive API sends it, under the directory's own name).

    The bytes of the files `keep` chooses are kept, up to `file_cap` each.
    """
    tree = Tree()
    with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks), 256 * 1024), mode="r|") as archive:
        for member in archive:
            _, _, path = member.name.partition("/")
            if not path or skipped(path):
                continue
            if len(tree.entries) >= max_entries:
                raise SubmissionTooLarge(f"the workspace holds more than {max_entries} files; remove generated files")
            entry, data = _entry(archive, member, file_cap)
            tree.entries[path] = entry
            if data is not None and keep is not None and keep(path, entry):
                tree.data[path] = data
    return tree


def _entry(archive: tarfile.TarFile, member: tarfile.TarInfo, file_cap: int) -> tuple[Entry, bytes | None]:
    if member.isdir():
        return Entry("dir"), None
    if member.issym():
        return Entry("link", digest=member.linkname), None
    if not member.isfile():
        return Entry("other", digest=member.linkname), None
    executable = bool(member.mode & 0o111)
    handle = archive.extractfile(member)
    digest, kept = hashlib.sha256(), io.BytesIO()
    while handle is not None and (chunk := handle.read(1024 * 1024)):
        digest.update(chunk)
        if kept.tell() <= file_cap:
            kept.write(chunk)
    data = kept.getvalue() if member.size <= file_cap else None
    return Entry("file", executable, digest.hexdigest(), member.size), data


def differs_from(pristine: Tree) -> Callable[[str, Entry], bool]:
    """For read_tree: keep the bytes of the files that are not as they are in `pristine`."""
    return lambda path, entry: pristine.entries.get(path) != entry


def compare(pristine: Tree, submitted: Tree, policy: PathPolicy, file_cap: int) -> ChangeSet:
    """Every difference between the two trees, sorted into written, deleted and refused."""
    changes = ChangeSet()
    for path, entry in sorted(submitted.entries.items()):
        before = pristine.entries.get(path)
        if entry == before or (entry.kind == "dir" and before is None):
            continue
        reason = policy.refusal(path, is_new=before is None) or _shape_refusal(path, entry, before, pristine, file_cap)
        if reason:
            changes.refused[path] = reason
        elif entry.kind == "file" and (before is None or before.kind == "file"):
            changes.written[path] = submitted.data[path]
            if entry.executable:
                changes.executable.add(path)
    for path, entry in sorted(pristine.entries.items()):
        if entry.kind == "dir" or path in submitted.entries:
            continue
        reason = policy.refusal(path, is_new=False)
        if reason:
            changes.refused[path] = f"deleted: {reason}"
        else:
            changes.deleted.append(path)
    return changes


def _shape_refusal(path: str, entry: Entry, before: Entry | None, pristine: Tree, file_cap: int) -> str | None:
    if entry.kind == "link":
        return "a symbolic link; submit regular files"
    if entry.kind == "other":
        return "not a regular file"
    if before is not None and before.kind != entry.kind:
        return f"replaces a {before.kind} of the task with a {entry.kind}"
    if entry.kind == "file" and entry.size > file_cap:
        return f"{entry.size} bytes is over the {file_cap}-byte limit for one file"
    folder = posixpath.dirname(path)
    while folder:
        above = pristine.entries.get(folder)
        if above is not None and above.kind != "dir":
            return f"lies under {folder}, which is a {above.kind} in the task"
        folder = posixpath.dirname(folder)
    return None


def archive_of(
    files: dict[str, bytes],
    executable: Collection[str] = (),
    existing: Collection[str] = (),
    root_owned: Collection[str] = (),
    sealed_folders: Collection[str] = (),
) -> bytes:
    """A tar of `files` and their new folders (not the `existing` ones), owned by the agent user.

    Files and new folders in `root_owned` belong to root instead, read-only to the agent. Each of `sealed_folders`
    (new or not) belongs to root with the sticky bit, world-writable: the agent may add files there but not remove or
    rename root's.
    """
    buffer, now = io.BytesIO(), int(time.time())
    folders = {folder for path in files for folder in folders_above(path)} - set(existing) - set(sealed_folders)
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for folder in sorted([*folders, *sealed_folders]):
            info = tarfile.TarInfo(folder)
            info.type, info.mtime = tarfile.DIRTYPE, now
            if folder in sealed_folders:
                info.mode, info.uid = 0o1777, 0
            else:
                info.mode, info.uid = 0o755, 0 if folder in root_owned else AGENT_UID
            info.gid = info.uid
            archive.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), now
            info.uid = info.gid = 0 if path in root_owned else AGENT_UID
            info.mode = 0o755 if path in executable else 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def folders_above(path: str) -> Iterator[str]:
    """Each folder that holds `path`, innermost first."""
    while path := posixpath.dirname(path):
        yield path
