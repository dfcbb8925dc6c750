"""Image operations other parts need: build from a context folder, remove, and read an image's files."""

from __future__ import annotations

import io
import itertools
import logging
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import docker
import docker.errors

from sandbox.errors import ImageBuildFailed, ImageNotFound

log = logging.getLogger(__name__)


def build_image(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    buildargs: Mapping[str, str],
    labels: Mapping[str, str],
    target: str | None = None,
) -> None:
    """Build `context`/Dockerfile (up to stage `target`, or whole) as `tag` with no network; ImageBuildFailed carries
    the build's output."""
    try:
        client.images.build(
            target=target,
            path=str(context),
            tag=tag,
            buildargs=dict(buildargs),
            labels=dict(labels),
            network_mode="none",
            rm=True,
            forcerm=True,
        )
    except docker.errors.BuildError as error:
        output = "".join(str(step.get("stream", "")) for step in error.build_log) + "\n" + str(error.msg)
        raise ImageBuildFailed(f"building image {tag} failed: {error.msg}", output) from error


def remove_image(client: docker.DockerClient, tag: str) -> None:
    """Remove `tag` if it exists; a refusal (an image still in use) is logged, not raised."""
    try:
        client.images.remove(tag, force=True, noprune=False)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as error:
        log.warning("could not remove image %s: %s", tag, error)


def export_begun(api: docker.APIClient, container: str, image: str) -> Iterator[bytes]:
    """The `docker export` of `container` as byte chunks, its first already read: from then on the engine holds the
    container's files for the export, so the container itself may be removed while the chunks are read."""
    try:
        chunks = iter(api.export(container, chunk_size=1 << 20))
        first = next(chunks, b"")
    except docker.errors.ImageNotFound as error:
        raise ImageNotFound(f"image {image!r} not found locally: build it first") from error
    return itertools.chain([first], chunks)


def tar_files(chunks: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
    """Every regular file of a tar stream as (path without a leading slash, bytes); directories end in /."""
    stream = io.BufferedReader(_ChunkReader(chunks), 1 << 20)
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            if member.isfile():
                handle = archive.extractfile(member)
                yield member.name.lstrip("./"), handle.read() if handle else b""
            elif member.isdir():
                yield member.name.lstrip("./") + "/", b""


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
