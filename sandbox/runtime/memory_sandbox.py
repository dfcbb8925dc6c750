"""An in-memory `Sandbox`: the logic above the sandbox (tools, stepping, scoring), tested in milliseconds.

Files behave as in a container (the same errors, limits, listing order and tar layout); commands do not run, a
`Commands` callable answers them instead, so a test says what each command it expects prints.
"""

from __future__ import annotations

import io
import itertools
import posixpath
import re
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from sandbox.errors import FileTooLarge, SandboxError, SandboxFileNotFound, SandboxGone
from sandbox.layout import AGENT_UID
from sandbox.limits import Limits
from sandbox.runtime.sandbox_protocol import DirEntry, ExecResult


@dataclass(frozen=True)
class Command:
    """One exec as a script sees it: a shell string arrives as argv ["sh", "-c", string]."""

    argv: list[str]
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    user: str | None = None


# What a command answers, given the command and the sandbox it runs in.
Commands = Callable[[Command, "MemorySandbox"], ExecResult]
_MAX_LINK_HOPS = 8
_ids = itertools.count(1)


def no_commands(command: Command, sandbox: MemorySandbox) -> ExecResult:
    """The default: every command is missing, as it would be in a sandbox with no shell."""
    return ExecResult(
        127, "", f"{command.argv[0]}: not available in the in-memory sandbox; pass it `commands`\n", False, False, 0.0
    )


@dataclass
class _Node:
    kind: str  # "file", "dir" or "link"
    data: bytes = b""
    mode: int = 0o644
    target: str = ""


@dataclass
class MemorySandbox:
    """A `Sandbox` whose files live in a dict; commands are answered by `commands`."""

    limits: Limits = field(default_factory=Limits)
    user: str = "agent"
    commands: Commands = no_commands
    id: str = field(default_factory=lambda: f"memory-{next(_ids)}")
    labels: dict[str, str] = field(default_factory=dict)
    on_destroy: Callable[[str], object] | None = None
    nodes: dict[str, _Node] = field(default_factory=lambda: {"/": _Node("dir", mode=0o755)})
    executed: list[list[str]] = field(default_factory=list)
    frozen: bool = False
    destroyed: bool = False

    @classmethod
    def with_files(cls, files: Mapping[str, bytes | str], **options) -> MemorySandbox:
        sandbox = cls(**options)
        for path, data in files.items():
            sandbox.write_file(path, data)
        return sandbox

    def __enter__(self) -> MemorySandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def exec(
        self,
        command: str | list[str],
        timeout: float = 30.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        if not 0 < timeout <= 24 * 3600:
            raise ValueError(f"timeout must be in (0, 86400] seconds, got {timeout}")
        self.ensure_running()
        argv = command if isinstance(command, list) else ["sh", "-c", command]
        self.executed.append(argv)
        if argv[:3] == ["realpath", "-m", "--"] and len(argv) == 4:  # path checks ask the tree, which is here
            return ExecResult(0, self.real_path(argv[3]) + "\n", "", False, False, 0.0)
        asked = Command(argv, cwd, dict(env or {}), timeout, user)
        return _capped(self.commands(asked, self), self.limits.output_cap_bytes)

    def real_path(self, path: str) -> str:
        """`realpath -m`: every symbolic link on the way resolved; missing parts are kept as they are."""
        resolved = "/"
        pending = [part for part in _absolute(path).split("/") if part]
        hops = 0
        while pending:
            part = pending.pop(0)
            candidate = posixpath.normpath(posixpath.join(resolved, part))
            node = self.nodes.get(candidate)
            if node is not None and node.kind == "link" and hops < 40:
                hops += 1
                target = node.target if node.target.startswith("/") else posixpath.join(resolved, node.target)
                pending = [p for p in posixpath.normpath(target).split("/") if p] + pending
                resolved = "/"
            else:
                resolved = candidate
        return resolved

    def ensure_running(self) -> None:
        if self.destroyed or self.frozen:
            state = "removed" if self.destroyed else "stopped"
            raise SandboxGone(f"sandbox {self.id} is {state}; start a new sandbox")

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        path = _absolute(path)
        payload = data.encode() if isinstance(data, str) else data
        limit = self.limits.file_size_bytes
        if len(payload) > limit:
            raise FileTooLarge(f"{path}: {len(payload)} bytes is over the {limit}-byte file limit; write smaller files")
        if self.destroyed:
            raise SandboxGone(f"sandbox {self.id} is removed; start a new sandbox")
        if path == "/" or self.nodes.get(path, _Node("file")).kind == "dir":
            raise IsADirectoryError(f"cannot write to a directory path: {path!r}")
        self.make_dirs(posixpath.dirname(path))
        self.nodes[path] = _Node("file", payload, mode)

    def read_file(self, path: str) -> bytes:
        node, path = self._resolve(_absolute(path))
        if node.kind == "dir":
            raise IsADirectoryError(f"{path} is a directory; use list_dir")
        if len(node.data) > self.limits.file_size_bytes:
            raise FileTooLarge(
                f"{path}: {len(node.data)} bytes is over the {self.limits.file_size_bytes}-byte file limit; "
                "read a smaller file"
            )
        return node.data

    def list_dir(self, path: str) -> list[DirEntry]:
        path = _absolute(path)
        node = self.nodes.get(path)
        if node is None:
            raise SandboxFileNotFound(f"no such directory in the sandbox: {path}")
        if node.kind != "dir":
            raise NotADirectoryError(f"{path} is not a directory; use read_file")
        entries = [
            DirEntry(name=posixpath.basename(child), kind=entry.kind, size=len(entry.data))
            for child, entry in self.nodes.items()
            if child != path and posixpath.dirname(child) == path
        ]
        return sorted(entries, key=lambda entry: (entry.kind != "dir", entry.name))

    def search(self, pattern: str, path: str) -> ExecResult:
        """grep -rnIE's answer, with Python's regular expressions standing in for grep's."""
        self.ensure_running()
        path = _absolute(path)
        if path not in self.nodes:
            return ExecResult(2, "", f"grep: {path}: No such file or directory\n", False, False, 0.0)
        try:
            regex = re.compile(pattern)
        except re.error as error:
            return ExecResult(2, "", f"grep: {error}\n", False, False, 0.0)
        lines = []
        for name in self._tree(path):
            node = self.nodes[name]
            if node.kind != "file" or b"\0" in node.data:
                continue
            for number, line in enumerate(node.data.decode(errors="replace").splitlines(), 1):
                if regex.search(line):
                    lines.append(f"{name}:{number}:{line}\n")
        return _capped(
            ExecResult(0 if lines else 1, "".join(lines), "", False, False, 0.0), self.limits.output_cap_bytes
        )

    def export_tree(self, path: str, max_bytes: int) -> Iterator[bytes]:
        """The tree as the engine's archive API gives it: members under the path's own name, owned by the agent."""
        path = _absolute(path)
        if path not in self.nodes:
            raise SandboxFileNotFound(f"no such file or directory in the sandbox: {path}")
        buffer = io.BytesIO()
        root = posixpath.dirname(path)
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name in [path, *self._tree(path)]:
                node = self.nodes[name]
                info = tarfile.TarInfo(posixpath.relpath(name, root) if name != "/" else ".")
                info.mode, info.mtime, info.uid, info.gid = node.mode, int(time.time()), AGENT_UID, AGENT_UID
                if node.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif node.kind == "link":
                    info.type, info.linkname = tarfile.SYMTYPE, node.target
                    tar.addfile(info)
                else:
                    info.size = len(node.data)
                    tar.addfile(info, io.BytesIO(node.data))
        archive = buffer.getvalue()
        if len(archive) > max_bytes:
            raise FileTooLarge(f"{path}: the archive grew past {max_bytes} bytes; the tree is too large to transfer")
        return iter([archive])

    def import_tree(self, path: str, archive: bytes) -> None:
        path = _absolute(path)
        if self.nodes.get(path, _Node("file")).kind != "dir":
            raise SandboxFileNotFound(f"no such file or directory in the sandbox: {path}")
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
            for member in tar:
                name = posixpath.normpath(posixpath.join(path, member.name))
                if member.isdir():
                    self.make_dirs(name, member.mode)
                    continue
                self.make_dirs(posixpath.dirname(name))
                if member.issym():
                    self.nodes[name] = _Node("link", target=member.linkname)
                elif member.isfile():
                    handle = tar.extractfile(member)
                    self.nodes[name] = _Node("file", handle.read() if handle else b"", member.mode)

    def prime_import(self, path: str) -> None:
        """An import here is a dictionary update already."""

    def prime_exec(self) -> None:
        """A command here is a function call already."""

    def freeze(self) -> None:
        self.frozen = True

    def destroy(self) -> None:
        if self.destroyed:
            return
        self.destroyed = True
        if self.on_destroy:
            self.on_destroy(self.id)

    def _resolve(self, path: str) -> tuple[_Node, str]:
        if self.destroyed:
            raise SandboxGone(f"sandbox {self.id} is removed; start a new sandbox")
        for _ in range(_MAX_LINK_HOPS + 1):
            node = self.nodes.get(path)
            if node is None:
                raise SandboxFileNotFound(f"no such file or directory in the sandbox: {path}")
            if node.kind != "link":
                return node, path
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), node.target))
        raise SandboxError(f"{path}: too many levels of symbolic links")

    def make_dirs(self, path: str, mode: int = 0o755) -> None:
        """`mkdir -p`: every missing directory on the way to `path`."""
        parts = [part for part in path.split("/") if part]
        for depth in range(1, len(parts) + 1):
            name = "/" + "/".join(parts[:depth])
            node = self.nodes.setdefault(name, _Node("dir", mode=mode))
            if node.kind != "dir":
                raise NotADirectoryError(f"{name} is not a directory")

    def _tree(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            name for name in self.nodes if name.startswith(prefix) and "/.git/" not in f"{name}/"[len(path) :]
        )


def _absolute(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"sandbox paths must be absolute, got {path!r}")
    return posixpath.normpath(path)


def _capped(result: ExecResult, cap: int) -> ExecResult:
    """Each stream past the cap is cut and flagged, as the Docker sandbox's exec stream does."""
    stdout, stderr = result.stdout.encode(), result.stderr.encode()
    if len(stdout) <= cap and len(stderr) <= cap:
        return result
    return ExecResult(
        result.exit_code,
        stdout[:cap].decode(errors="replace"),
        stderr[:cap].decode(errors="replace"),
        result.timed_out,
        True,
        result.duration_s,
        result.oom_killed,
    )
