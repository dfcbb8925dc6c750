"""The canary scan: every file an agent can see, binaries and the members of zips and wheels included, searched for
what the deletion removed. The repository image is read once per run; each task's own files are scanned per task."""

from __future__ import annotations

import ast
import bisect
import hashlib
import io
import logging
import os
import pickle
import re
import tarfile
import threading
import zipfile
from collections.abc import Iterable, Iterator, Set
from dataclasses import dataclass, field
from pathlib import Path

from proto.python_ast import parse_python
from sandbox import DockerBackend
from sandbox.layout import CACHE_NAMES as CACHE_NAME_GLOBS
from task_synth.candidates.deletion import Deletion

log = logging.getLogger(__name__)

TOKEN = re.compile(rb"[A-Za-z_][A-Za-z0-9_]{3,63}")
MIN_IDENTIFIER = 5
MIN_LITERAL = 8
CACHE_NAMES = re.compile(
    r"(^|/)(" + "|".join(re.escape(name).replace(r"\*", "[^/]*") for name in CACHE_NAME_GLOBS) + r")(/|$)"
)
SCRUBBED_ROOTS = ("workspace/", "opt/venv/", "home/agent/", "root/")
# Archives Python imports from or pip installs: a copy of the deleted code can hide in them.
ZIP_SUFFIXES = (".whl", ".zip", ".egg", ".pyz")
ZIP_MEMBER_CAP = 64 << 20
# A line this long (stripped) is distinctive enough that finding most of them elsewhere means the code was copied.
VENDORED_LINE_MIN = 20
VENDORED_LINES_MIN = 3
VENDORED_FRACTION = 0.5


@dataclass(frozen=True)
class Canaries:
    """Identifiers and literals of the deleted code found nowhere in the deleted workspace or the repo image."""

    identifiers: frozenset[bytes]
    literals: frozenset[bytes]
    # Whole source lines of the deleted code (stripped): they mark a copy of a unit too small for a distinctive name.
    lines: frozenset[bytes] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.identifiers or self.literals or self.lines)


@dataclass(frozen=True)
class Hit:
    path: str
    canary: str


@dataclass
class ImageIndex:
    """What one read of the repository image knows: its tokens and the digests of its long source lines."""

    tokens: set[bytes] = field(default_factory=set)
    lines: set[bytes] = field(default_factory=set)
    _sorted: list[bytes] | None = None

    @property
    def sorted_tokens(self) -> list[bytes]:
        """The tokens in order, for prefix lookups; sorted once, after the image was read."""
        if self._sorted is None:
            self._sorted = sorted(self.tokens)
        return self._sorted

    def add(self, data: bytes) -> None:
        self.tokens.update(TOKEN.findall(data))
        self.lines.update(line_digest(line) for line in distinctive_lines(data))


def distinctive_lines(data: bytes) -> list[bytes]:
    return [stripped for line in data.splitlines() if len(stripped := line.strip()) >= VENDORED_LINE_MIN]


def line_digest(line: bytes) -> bytes:
    return hashlib.blake2b(line, digest_size=8).digest()


def vendored_copy(deleted_source: str, index: ImageIndex) -> tuple[int, int]:
    """(lines found in the image, distinctive lines) of the deleted code; mostly found means a copy lives elsewhere."""
    lines = set(distinctive_lines(deleted_source.encode()))
    return sum(1 for line in lines if line_digest(line) in index.lines), len(lines)


def is_vendored(found: int, total: int) -> bool:
    return found >= VENDORED_LINES_MIN and found >= VENDORED_FRACTION * total


def with_zip_members(path: str, data: bytes) -> Iterator[tuple[str, bytes]]:
    """The file itself and, for a zip or wheel, each of its members as `path!member` (one level deep)."""
    yield path, data
    if not path.endswith(ZIP_SUFFIXES):
        return
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.infolist():
                if not member.is_dir() and member.file_size <= ZIP_MEMBER_CAP:
                    yield f"{path}!{member.filename}", archive.read(member)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError):
        return  # not a zip after all, or one Python cannot read: its bytes were yielded and are scanned as they are


def archive_files(archive: bytes) -> Iterator[tuple[str, bytes]]:
    """The regular files of a (gzipped) tar as (path without a leading ./ or /, bytes)."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        for member in tar:
            if member.isfile():
                handle = tar.extractfile(member)
                yield member.name.lstrip("./"), handle.read() if handle else b""


class ScanStopped(Exception):
    """The run that wanted the image's index stopped while the image was read."""


def index_image(
    backend: DockerBackend, image: str, packages: list[str], stop: threading.Event | None = None
) -> tuple[ImageIndex, list[Hit]]:
    """One read of the repository image: every token and long line (zip members too), and what must never be in it,
    an installed copy of the package or a cache under a scrubbed root. Raises ScanStopped at the next file once
    `stop` is set: a run stopped during its baseline waits for this thread, and a whole read took minutes under load."""
    index = ImageIndex()
    hits: list[Hit] = []
    installed = _installed_pattern(packages)
    for outer, outer_data in backend.image_files(image):
        if stop is not None and stop.is_set():
            raise ScanStopped(f"the read of {image} was stopped")
        for path, data in with_zip_members(outer, outer_data):
            index.add(data)
            hits += _forbidden(path, installed)
    return index, hits


INDEX_FORMAT = 1  # bumped whenever what an index holds changes, so that no older one is read


def cached_index(
    backend: DockerBackend, image: str, packages: list[str], cache_dir: Path, stop: threading.Event | None = None
) -> tuple[ImageIndex, list[Hit]]:
    """`index_image`, kept under `cache_dir` by the image's content ID: a run on a repository image that an earlier
    run read (a rerun, a resumed run, the next kind of unit) loads it in a second instead of reading the whole image
    again (17 s for a small project)."""
    key = hashlib.sha256(f"{INDEX_FORMAT}|{backend.image_id(image)}|{sorted(packages)}".encode()).hexdigest()[:32]
    path = cache_dir / "image-index" / f"{key}.pickle"
    try:
        tokens, lines, hits = pickle.loads(path.read_bytes())
        return ImageIndex(tokens, lines), hits
    except FileNotFoundError:
        pass
    except Exception as error:  # a truncated or foreign file: read the image again and write it anew
        log.info("the image index cached in %s does not load (%s); reading the image again", path, error)
    index, hits = index_image(backend, image, packages, stop)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(pickle.dumps((index.tokens, index.lines, hits), protocol=pickle.HIGHEST_PROTOCOL))
        partial.replace(path)  # whole or absent: a run stopped mid-write leaves no half of it
    except OSError as error:
        log.info("the image index could not be cached in %s: %s", path, error)
    return index, hits


def _installed_pattern(packages: list[str]) -> re.Pattern[str] | None:
    if not packages:
        return None
    return re.compile(
        r"^opt/venv/lib/python[0-9.]+/site-packages/(" + "|".join(map(re.escape, packages)) + r")(/|\.py$)"
    )


def _forbidden(path: str, installed: re.Pattern[str] | None) -> list[Hit]:
    hits = []
    if path.startswith(SCRUBBED_ROOTS) and CACHE_NAMES.search(path):
        hits.append(Hit(path, "cache left behind"))
    if installed is not None and installed.match(path):
        hits.append(Hit(path, "installed copy of the package"))
    return hits


def _literals(source: str) -> set[str]:
    tree = parse_python(source)
    if tree is None:
        return set()
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def _prefix_of_any(token: bytes, sorted_tokens: list[bytes]) -> bool:
    index = bisect.bisect_left(sorted_tokens, token)
    return index < len(sorted_tokens) and sorted_tokens[index].startswith(token)


def canaries_for(
    deletion: Deletion,
    workspace_text: bytes,
    repo_image_tokens: set[bytes],
    image_lines: Set[bytes] = frozenset(),
    sorted_image_tokens: list[bytes] | None = None,
) -> Canaries:
    """What only the deleted code held: tokens, literals and long lines gone from the changed files and absent
    elsewhere.

    An identifier that begins any token of the workspace or the image is no canary: the scan matches prefixes.
    `image_lines` are the digests of the image's long lines (`ImageIndex.lines`).
    """
    before = "\n".join(deletion.original.values())
    after = "\n".join(text for text in deletion.changed.values() if text)
    in_workspace = sorted(set(TOKEN.findall(workspace_text)))
    in_image = sorted_image_tokens if sorted_image_tokens is not None else sorted(repo_image_tokens)
    identifiers = {
        token
        for token in set(TOKEN.findall(before.encode())) - set(TOKEN.findall(after.encode()))
        if len(token) >= MIN_IDENTIFIER
        and not _prefix_of_any(token, in_workspace)
        and not _prefix_of_any(token, in_image)
    }
    literals = set()
    for literal in _literals(before) - _literals(after):
        encoded = literal.encode()
        if len(encoded) < MIN_LITERAL or encoded in workspace_text:
            continue
        # A literal counts only with a word of its own: long common messages occur in vendored code.
        if any(token not in repo_image_tokens for token in TOKEN.findall(encoded)):
            literals.add(encoded)
    kept = set(distinctive_lines(after.encode()))
    lines = {
        line
        for line in set(distinctive_lines(before.encode())) - kept
        if line not in workspace_text and line_digest(line) not in image_lines and TOKEN.search(line)
    }
    return Canaries(frozenset(identifiers), frozenset(literals), frozenset(lines))


def _pattern(canaries: Canaries) -> re.Pattern[bytes]:
    # A name must start a token; its end is left open, as in a .pyc a marshal type byte (often a letter) follows it.
    words = b"|".join(re.escape(word) for word in sorted(canaries.identifiers, key=len, reverse=True))
    literals = b"|".join(
        re.escape(literal) for literal in sorted(canaries.literals | canaries.lines, key=len, reverse=True)
    )
    parts = ([rb"(?<![A-Za-z0-9_])(?:" + words + rb")"] if words else []) + ([literals] if literals else [])
    return re.compile(b"|".join(parts))


def scan_files(
    files: Iterable[tuple[str, bytes]], canaries: Canaries, test_paths: set[str], packages: list[str]
) -> list[Hit]:
    """Canary hits outside the workspace's test files, plus caches and installed copies the scrub should have removed.

    `files` are (path without a leading slash, bytes), as in the image's root; zips and wheels are searched inside.
    """
    pattern = _pattern(canaries) if canaries else None
    needles = sorted(canaries.identifiers | canaries.literals | canaries.lines)
    installed = _installed_pattern(packages)
    hits: list[Hit] = []
    for outer, outer_data in files:
        for path, data in with_zip_members(outer, outer_data):
            forbidden = _forbidden(path, installed)
            hits += forbidden
            if any(hit.canary.startswith("installed") for hit in forbidden):
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


def scan_image(
    backend: DockerBackend, image: str, canaries: Canaries, test_paths: set[str], packages: list[str]
) -> list[Hit]:
    """`scan_files` over every file of an image."""
    return scan_files(backend.image_files(image), canaries, test_paths, packages)
