"""What every sandbox offers, whatever runs it: the `Sandbox` Protocol and the typed results it returns."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sandbox.errors import ExecTimeout
from sandbox.limits import Limits


@dataclass(frozen=True)
class ExecResult:
    """What one command did."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration_s: float
    oom_killed: bool = False
    reclaimed: int = 0  # processes earlier commands left running, killed first because they held every free pid

    def raise_for_timeout(self) -> ExecResult:
        if self.timed_out:
            raise ExecTimeout(
                f"command timed out after {self.duration_s:.1f}s; raise its timeout or make it faster", self
            )
        return self


@dataclass(frozen=True)
class DirEntry:
    name: str
    kind: str  # "file", "dir", "link" or "other"
    size: int


@runtime_checkable
class Sandbox(Protocol):
    """One isolated machine an episode or a synthesis run works in; use it as a context manager so it is destroyed.

    Paths are absolute. File errors are typed: `SandboxFileNotFound`, `FileTooLarge`, `IsADirectoryError`,
    `NotADirectoryError`; a sandbox that died underneath raises `SandboxGone`.
    """

    id: str
    limits: Limits
    user: str

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...

    def exec(
        self,
        command: str | list[str],
        timeout: float = 30.0,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run `command` (a shell string, or argv) with a hard timeout; output past the cap is cut and flagged."""
        ...

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write `data` to `path`, creating parent directories."""
        ...

    def read_file(self, path: str) -> bytes:
        """The bytes of the file at `path`, following symbolic links."""
        ...

    def list_dir(self, path: str) -> list[DirEntry]:
        """The entries of a directory, directories first, then by name."""
        ...

    def search(self, pattern: str, path: str) -> ExecResult:
        """`grep -rnIE`'s answer for an extended regular expression under `path` (.git left out)."""
        ...

    def export_tree(self, path: str, max_bytes: int) -> Iterator[bytes]:
        """The tar stream of the tree at `path` (works on a frozen sandbox)."""
        ...

    def import_tree(self, path: str, archive: bytes) -> None:
        """Unpack a tar archive into the existing directory `path`."""
        ...

    def prime_exec(self) -> None:
        """Make the next `exec` as the sandbox's user cheap where the runtime can (its process started already): a
        warm container readied for a reset's first step calls it; a no-op where a start is cheap anyway."""
        ...

    def prime_import(self, path: str) -> None:
        """Make the next `import_tree` into `path` cheap where the runtime can (a receiver that already waits in the
        sandbox): a warm container readied for a reset or a fork calls it; a no-op where an import is cheap anyway."""
        ...

    def ensure_running(self) -> None:
        """Raise `SandboxGone` unless the sandbox still runs."""
        ...

    def freeze(self) -> None:
        """Stop every process but keep the files readable: nothing the agent started lives on."""
        ...

    def destroy(self) -> None:
        """Remove the sandbox; safe to call twice."""
        ...
