"""Unpacking an archive from outside (an sdist, a zip, a tree read back from a container) into one folder, refusing
every member that would write outside it, on every Python regrow supports.

tarfile's `data` filter came in Python 3.11.4, and Debian bookworm ships 3.11.2, so the same refusals are made here
first, for the whole archive before anything is written: an absolute name, a name or a link that leaves the folder
(also through a link the archive made itself), and a device, pipe or other special file. Where the interpreter has the
filter, it is applied as well. Standard library only, so that a test can run this file under each interpreter alone.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

_MAX_LINK_HOPS = 40  # as the kernel's own limit on symlinks followed in one lookup (ELOOP)


class UnsafeArchive(ValueError):
    """An archive holds a member that would write outside its destination, or a device or other special file."""


def extract_archive(source: Path | str | bytes | BinaryIO, destination: Path | str, label: str | None = None) -> None:
    """Unpack a tar (any compression) or zip archive into `destination` (created if missing).

    Raises UnsafeArchive, naming the member and why, before anything is written; tarfile.TarError or
    zipfile.BadZipFile when the archive cannot be read at all."""
    destination = Path(destination)
    label = label or (str(source) if isinstance(source, (str, Path)) else "the archive")
    data = io.BytesIO(source) if isinstance(source, bytes) else source
    destination.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(data):
        _extract_zip(data, destination, label)
    else:
        if not isinstance(data, (str, Path)):
            data.seek(0)
        _extract_tar(data, destination, label)


def _extract_zip(data: Path | str | BinaryIO, destination: Path, label: str) -> None:
    with zipfile.ZipFile(data) as archive:
        for info in archive.infolist():
            # zipfile writes a symlink or device entry as a plain file of its bytes; only the name can leave the folder
            _refuse_escaping_name(info.filename, label)
        archive.extractall(destination)


def _extract_tar(data: Path | str | BinaryIO, destination: Path, label: str) -> None:
    opened = tarfile.open(data, mode="r:*") if isinstance(data, (str, Path)) else tarfile.open(fileobj=data, mode="r:*")
    with opened as archive:
        members = archive.getmembers()
        check_members(members, label)
        if hasattr(tarfile, "data_filter"):
            try:
                archive.extractall(destination, filter="data")
            except tarfile.FilterError as error:  # the checks above refuse all of these first; kept as a second wall
                raise UnsafeArchive(f"{label}: {error}") from error
        else:
            _extract_without_filter(archive, members, destination, label)


def check_members(members: Iterable[tarfile.TarInfo], label: str) -> None:
    """UnsafeArchive for the first member that is special or would land (or point) outside the archive's folder,
    following the links the archive itself makes, as they would stand once unpacked."""
    links: dict[str, str] = {}
    for member in members:
        name = _refuse_escaping_name(member.name, label)
        parent = _resolved(posixpath.dirname(name), links, member.name, label)
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise UnsafeArchive(f"{label}: member {member.name!r} is a device, pipe or other special file")
        if member.issym():
            if member.linkname.startswith("/"):
                raise UnsafeArchive(f"{label}: member {member.name!r} links to the absolute path {member.linkname!r}")
            target = _resolved(posixpath.join(parent, member.linkname), links, member.name, label)
            links[posixpath.join(parent, posixpath.basename(name))] = target
        elif member.islnk():
            _resolved(_refuse_escaping_name(member.linkname, label), links, member.name, label)
        else:
            links.pop(posixpath.join(parent, posixpath.basename(name)), None)


def _refuse_escaping_name(name: str, label: str) -> str:
    """The member's name, normalized; UnsafeArchive if it is absolute or climbs out of the folder."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchive(f"{label}: member {name!r} has an absolute path")
    normal = posixpath.normpath(name)
    if normal == ".." or normal.startswith("../"):
        raise UnsafeArchive(f"{label}: member {name!r} would be written outside the destination")
    return "" if normal == "." else normal


def _resolved(path: str, links: dict[str, str], member: str, label: str) -> str:
    """`path` (relative to the folder) with the archive's own links followed; UnsafeArchive when it leaves."""
    done: list[str] = []
    todo = [part for part in path.split("/") if part not in ("", ".")]
    hops = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if not done:
                raise UnsafeArchive(f"{label}: member {member!r} would reach outside the destination")
            done.pop()
            continue
        here = "/".join([*done, part])
        if here in links:
            hops += 1
            if hops > _MAX_LINK_HOPS:
                raise UnsafeArchive(f"{label}: member {member!r} goes through a loop of links")
            done, todo = [], [p for p in links[here].split("/") if p not in ("", ".")] + todo
            continue
        done.append(part)
    return "/".join(done)


def _extract_without_filter(archive: tarfile.TarFile, members: list[tarfile.TarInfo], root: Path, label: str) -> None:
    """What the `data` filter does, for an interpreter without one: each member checked again against the disk as it
    stands, written with no owner, time or special bit of the archive's."""
    real_root = os.path.realpath(root)
    for member in members:
        target = os.path.realpath(os.path.join(real_root, member.name))
        if os.path.commonpath([real_root, target]) != real_root:
            raise UnsafeArchive(f"{label}: member {member.name!r} would be written outside the destination")
        if member.issym():
            pointed = os.path.realpath(os.path.join(os.path.dirname(target), member.linkname))
            if os.path.commonpath([real_root, pointed]) != real_root:
                raise UnsafeArchive(f"{label}: member {member.name!r} links outside the destination")
        archive.extract(member, real_root, set_attrs=False)
        if member.isfile() and not member.islnk():
            os.chmod(target, _data_mode(member.mode))


def _data_mode(mode: int) -> int:
    """A regular file's mode as the data filter leaves it: the owner reads and writes, no group or other write, no
    setuid, setgid or sticky bit, and execute bits only where the owner's is set."""
    mode = (mode & 0o755) | stat.S_IRUSR | stat.S_IWUSR
    return mode if mode & stat.S_IXUSR else mode & ~0o111
