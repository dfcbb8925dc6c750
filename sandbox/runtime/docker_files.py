"""File I/O with a Docker sandbox: tar archives through the engine API, binary-safe and size-limited."""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from collections.abc import Iterator

import docker
import docker.errors

from sandbox.errors import FileTooLarge, SandboxError, SandboxFileNotFound
from sandbox.layout import AGENT_UID
from sandbox.runtime.sandbox_protocol import DirEntry, ExecResult, Sandbox

_GO_MODE_DIR = 1 << 31
_GO_MODE_SYMLINK = 1 << 27
_MAX_LINK_HOPS = 8


def absolute_path(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"sandbox paths must be absolute, got {path!r}")
    return posixpath.normpath(path)


def _not_found_or_gone(sb: Sandbox, path: str, error: docker.errors.APIError) -> Exception:
    sb.ensure_running()  # raises SandboxGone when the container itself is missing
    if isinstance(error, docker.errors.NotFound):
        return SandboxFileNotFound(f"no such file or directory in the sandbox: {path}")
    return error


def write_file(api: docker.APIClient, sb: Sandbox, path: str, payload: bytes, mode: int) -> None:
    path = absolute_path(path)
    limit = sb.limits.file_size_bytes
    if len(payload) > limit:
        raise FileTooLarge(f"{path}: {len(payload)} bytes is over the {limit}-byte file limit; write smaller files")
    parent, name = posixpath.split(path)
    if not name:
        raise ValueError(f"cannot write to a directory path: {path!r}")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(payload), mode, int(time.time())
        info.uid = info.gid = AGENT_UID
        tar.addfile(info, io.BytesIO(payload))
    for attempt in range(2):
        try:
            api.put_archive(sb.id, parent, archive.getvalue())
            return
        except docker.errors.NotFound as error:
            if attempt:
                raise _not_found_or_gone(sb, parent, error) from error
            made = sb.exec(["mkdir", "-p", "--", parent], timeout=10)
            if made.exit_code != 0:
                raise SandboxError(f"cannot create directory {parent}: {made.stderr.strip()}") from error
        except docker.errors.APIError as error:
            raise _not_found_or_gone(sb, path, error) from error


def read_file(api: docker.APIClient, sb: Sandbox, path: str, hops: int = 0) -> bytes:
    path = absolute_path(path)
    limit = sb.limits.file_size_bytes
    try:
        stream, stat = api.get_archive(sb.id, path)
    except docker.errors.APIError as error:
        raise _not_found_or_gone(sb, path, error) from error
    go_mode = int(stat.get("mode", 0))
    if go_mode & _GO_MODE_SYMLINK and stat.get("linkTarget"):
        stream.close()
        if hops >= _MAX_LINK_HOPS:
            raise SandboxError(f"{path}: too many levels of symbolic links")
        return read_file(api, sb, posixpath.join(posixpath.dirname(path), stat["linkTarget"]), hops + 1)
    if go_mode & _GO_MODE_DIR:
        stream.close()
        raise IsADirectoryError(f"{path} is a directory; use list_dir")
    if int(stat.get("size", 0)) > limit:
        stream.close()
        raise FileTooLarge(f"{path}: {stat['size']} bytes is over the {limit}-byte file limit; read a smaller file")
    buffer = io.BytesIO()
    for chunk in stream:
        buffer.write(chunk)
        if buffer.tell() > limit + 64 * 1024:  # the archive of one file under the limit never gets here
            raise FileTooLarge(f"{path}: grew past the {limit}-byte file limit while being read")
    buffer.seek(0)
    with tarfile.open(fileobj=buffer, mode="r") as tar:
        member = tar.next()
        extracted = tar.extractfile(member) if member else None
        if extracted is None:
            raise SandboxError(f"{path}: not a regular file")
        return extracted.read()


def export_tree(api: docker.APIClient, sb: Sandbox, path: str, max_bytes: int) -> Iterator[bytes]:
    path = absolute_path(path)
    try:
        stream, _ = api.get_archive(sb.id, path, chunk_size=256 * 1024)
    except docker.errors.APIError as error:
        if isinstance(error, docker.errors.NotFound):
            raise SandboxFileNotFound(f"no such file or directory in the sandbox: {path}") from error
        raise
    return _capped(stream, path, max_bytes)


def _capped(stream: Iterator[bytes], path: str, max_bytes: int) -> Iterator[bytes]:
    seen = 0
    try:
        for chunk in stream:
            seen += len(chunk)
            if seen > max_bytes:
                raise FileTooLarge(
                    f"{path}: the archive grew past {max_bytes} bytes; the tree is too large to transfer"
                )
            yield chunk
    finally:
        close = getattr(stream, "close", None)
        if close:
            close()


def import_tree(api: docker.APIClient, sb: Sandbox, path: str, archive: bytes) -> None:
    path = absolute_path(path)
    try:
        api.put_archive(sb.id, path, archive)
    except docker.errors.APIError as error:
        raise _not_found_or_gone(sb, path, error) from error


_KINDS = {"f": "file", "d": "dir", "l": "link"}


def list_dir(sb: Sandbox, path: str) -> list[DirEntry]:
    path = absolute_path(path)
    # The trailing slash makes find refuse a file ("Not a directory") instead of listing nothing.
    listed = path.rstrip("/") + "/"
    result = sb.exec(["find", listed, "-mindepth", "1", "-maxdepth", "1", "-printf", r"%y\t%s\t%f\n"], timeout=30)
    if result.exit_code != 0:
        if "No such file" in result.stderr:
            raise SandboxFileNotFound(f"no such directory in the sandbox: {path}")
        if "Not a directory" in result.stderr:
            raise NotADirectoryError(f"{path} is not a directory; use read_file")
        raise SandboxError(f"cannot list {path}: {result.stderr.strip()}")
    entries = []
    for line in result.stdout.splitlines():
        kind, size, name = line.split("\t", 2)
        entries.append(DirEntry(name=name, kind=_KINDS.get(kind, "other"), size=int(size)))
    return sorted(entries, key=lambda entry: (entry.kind != "dir", entry.name))


def search(sb: Sandbox, pattern: str, path: str) -> ExecResult:
    path = absolute_path(path)
    return sb.exec(["grep", "-rnIE", "--exclude-dir=.git", "-e", pattern, "--", path], timeout=30)
