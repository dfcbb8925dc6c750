"""Tasks of one repository share almost all of their workspace: write the shared part once per warm container.

The base of a pool holds, for each working-tree path every task has, its most common version (the original, for a
file few tasks change), and of `.git` only what every task holds alike. A container is prepared with the install and
the base in the background; a reset then writes the task's own rest over it: every path where the task differs from
the base (its changed files, its git index and objects), a few entries instead of the whole tree. The rest overwrites
each base file the task has otherwise, and no path the task lacks is in the base, so the container ends up holding
exactly the task's workspace; `.git` takes nothing a task does not hold itself (a stray object would be a leak).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

Key = tuple[str, str, int, int, int, str]  # type, link target, mode, uid, gid, content digest


def _under_git(name: str) -> bool:
    return "/.git/" in f"/{name}/"


def _members(archive: bytes) -> dict[str, tuple[tarfile.TarInfo, bytes | None, Key]]:
    entries = {}
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive) if archive[:2] == b"\x1f\x8b" else archive)) as tar:
        for member in tar:
            handle = tar.extractfile(member) if member.isfile() else None
            data = handle.read() if handle else None
            digest = hashlib.sha256(data).hexdigest() if data is not None else ""
            entries[member.name] = (
                member,
                data,
                (str(member.type), member.linkname, member.mode, member.uid, member.gid, digest),
            )
    return entries


def _archive(entries: Iterable[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member, data in entries:
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


@dataclass
class WorkspaceLayers:
    """The base shared by the workspace archives of one pool, and each task's rest, computed once."""

    base: bytes = b""
    base_keys: dict[str, Key] = field(default_factory=dict)
    _rests: dict[str, bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, archives: Iterable[bytes]) -> WorkspaceLayers:
        """The layers of a pool whose tasks have these workspace archives (read one at a time)."""
        versions: dict[str, dict[Key, tuple[tarfile.TarInfo, bytes | None]]] = defaultdict(dict)
        counts: Counter[tuple[str, Key]] = Counter()
        tasks = 0
        for archive in archives:
            tasks += 1
            for name, (member, data, key) in _members(archive).items():
                versions[name].setdefault(key, (member, data))
                counts[name, key] += 1
        base: dict[str, tuple[tarfile.TarInfo, bytes | None, Key]] = {}
        for name, by_key in versions.items():
            key, seen = max(((key, counts[name, key]) for key in by_key), key=lambda pair: pair[1])
            in_all = sum(counts[name, other] for other in by_key) == tasks
            if in_all and (seen == tasks or not _under_git(name)):
                base[name] = (*by_key[key], key)
        ordered = sorted(base.values(), key=lambda entry: entry[0].name)  # parents before children
        return cls(_archive((member, data) for member, data, _ in ordered), {name: e[2] for name, e in base.items()})

    def rest(self, task_id: str, archive: bytes) -> bytes:
        """The entries of `archive` the base does not hold as they are, as a tar; cached per task."""
        with self._lock:
            known = self._rests.get(task_id)
        if known is not None:
            return known
        entries = _members(archive)
        rest = _archive(
            (member, data) for name, (member, data, key) in sorted(entries.items()) if self.base_keys.get(name) != key
        )
        with self._lock:
            self._rests[task_id] = rest
        return rest
