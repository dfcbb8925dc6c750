"""The canary scan: every file of a task image, binaries included, searched for what the deletion removed."""

from __future__ import annotations

import ast
import bisect
import io
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass

from sandbox import DockerBackend
from sandbox.owner import MANAGED_LABEL, OWNER_LABEL
from task_synth.deletion import Deletion
from task_synth.python_ast import parse_python

TOKEN = re.compile(rb"[A-Za-z_][A-Za-z0-9_]{3,63}")
MIN_IDENTIFIER = 5
MIN_LITERAL = 8
CACHE_NAMES = re.compile(
    r"(^|/)(__pycache__|[^/]+\.pyc|\.mypy_cache|\.pytest_cache|\.ruff_cache|\.hypothesis|\.coverage(\.[^/]*)?|\.tox|\.nox)(/|$)"
)
SCRUBBED_ROOTS = ("workspace/", "opt/venv/", "home/agent/", "root/")


@dataclass(frozen=True)
class Canaries:
    """Identifiers and literals of the deleted code found nowhere in the deleted workspace or the repo image."""

    identifiers: frozenset[bytes]
    literals: frozenset[bytes]

    def __bool__(self) -> bool:
        return bool(self.identifiers or self.literals)


@dataclass(frozen=True)
class Hit:
    path: str
    canary: str


class _ChunkReader(io.RawIOBase):
    """A file object over the byte chunks of `docker export`, for tarfile's stream mode."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


def image_files(backend: DockerBackend, image: str) -> Iterator[tuple[str, bytes]]:
    """Every regular file of the image's filesystem as (path without leading slash, bytes)."""
    container = backend.api.create_container(
        image, command=["true"], labels={MANAGED_LABEL: "1", OWNER_LABEL: backend.owner}, network_disabled=True
    )["Id"]
    try:
        stream = io.BufferedReader(_ChunkReader(iter(backend.api.export(container, chunk_size=1 << 20))), 1 << 20)
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                if member.isfile():
                    handle = archive.extractfile(member)
                    yield member.name.lstrip("./"), handle.read() if handle else b""
                elif member.isdir():
                    yield member.name.lstrip("./") + "/", b""
    finally:
        backend.remove(container)


def image_tokens(backend: DockerBackend, image: str) -> set[bytes]:
    """Every identifier-like token in the image: what a canary must not be, or it would hit by chance."""
    tokens: set[bytes] = set()
    for _, data in image_files(backend, image):
        tokens.update(TOKEN.findall(data))
    return tokens


def _literals(source: str) -> set[str]:
    tree = parse_python(source)
    if tree is None:
        return set()
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def _prefix_of_any(token: bytes, sorted_tokens: list[bytes]) -> bool:
    index = bisect.bisect_left(sorted_tokens, token)
    return index < len(sorted_tokens) and sorted_tokens[index].startswith(token)


def canaries_for(deletion: Deletion, workspace_text: bytes, repo_image_tokens: set[bytes]) -> Canaries:
    """What only the deleted code held: tokens and literals gone from the changed files and absent elsewhere.

    An identifier that begins any token of the workspace or the image is no canary: the scan matches prefixes.
    """
    before = "\n".join(deletion.original.values())
    after = "\n".join(text for text in deletion.changed.values() if text)
    known = sorted(set(TOKEN.findall(workspace_text)) | repo_image_tokens)
    identifiers = {
        token
        for token in set(TOKEN.findall(before.encode())) - set(TOKEN.findall(after.encode()))
        if len(token) >= MIN_IDENTIFIER and not _prefix_of_any(token, known)
    }
    literals = set()
    for literal in _literals(before) - _literals(after):
        encoded = literal.encode()
        if len(encoded) < MIN_LITERAL or encoded in workspace_text:
            continue
        # A literal counts only with a word of its own: long common messages occur in vendored code.
        if any(token not in repo_image_tokens for token in TOKEN.findall(encoded)):
            literals.add(encoded)
    return Canaries(frozenset(identifiers), frozenset(literals))


def _pattern(canaries: Canaries) -> re.Pattern[bytes]:
    # A name must start a token; its end is left open, as in a .pyc a marshal type byte (often a letter) follows it.
    words = b"|".join(re.escape(word) for word in sorted(canaries.identifiers, key=len, reverse=True))
    literals = b"|".join(re.escape(literal) for literal in sorted(canaries.literals, key=len, reverse=True))
    parts = ([rb"(?<![A-Za-z0-9_])(?:" + words + rb")"] if words else []) + ([literals] if literals else [])
    return re.compile(b"|".join(parts))


def scan_image(
    backend: DockerBackend, image: str, canaries: Canaries, test_paths: set[str], packages: list[str]
) -> list[Hit]:
    """Canary hits outside the workspace's test files, plus caches and installed copies the scrub should have removed."""
    pattern = _pattern(canaries) if canaries else None
    needles = sorted(canaries.identifiers | canaries.literals)
    installed = re.compile(r"^opt/venv/lib/python[0-9.]+/site-packages/(" + "|".join(map(re.escape, packages)) + r")(/|\.py$)")
    hits: list[Hit] = []
    for path, data in image_files(backend, image):
        if path.startswith(SCRUBBED_ROOTS) and CACHE_NAMES.search(path):
            hits.append(Hit(path, "cache left behind"))
        if packages and installed.match(path):
            hits.append(Hit(path, "installed copy of the package"))
            continue
        if pattern is None or (path.startswith("workspace/") and path[len("workspace/") :] in test_paths):
            continue
        # A plain substring search first: it is fast, and most files hold no canary at all.
        if not any(needle in data for needle in needles):
            continue
        match = pattern.search(data)
        if match:
            hits.append(Hit(path, match.group(0).decode(errors="replace")))
    return hits
