"""Image operations other parts need: build from a context folder, remove, and read an image's files."""

from __future__ import annotations

import io
import logging
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from sandbox.errors import ImageBuildFailed, ImageNotFound

if TYPE_CHECKING:
    from sandbox.docker_backend import DockerBackend

log = logging.getLogger(__name__)


def build_image(
    backend: DockerBackend,
    context: Path,
    tag: str,
    buildargs: Mapping[str, str],
    labels: Mapping[str, str],
    target: str | None = None,
) -> None:
    """Build `context`/Dockerfile (up to stage `target`, or whole) as `tag` with no network; ImageBuildFailed carries
    the build's output."""
    try:
        backend.client.images.build(
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


def remove_image(backend: DockerBackend, tag: str) -> None:
    """Remove `tag` if it exists; a refusal (an image still in use) is logged, not raised."""
    try:
        backend.client.images.remove(tag, force=True, noprune=False)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as error:
        log.warning("could not remove image %s: %s", tag, error)


def image_files(backend: DockerBackend, image: str) -> Iterator[tuple[str, bytes]]:
    """Every regular file of the image's filesystem as (path without a leading slash, bytes); directories end in /.

    The files are read from a container that is created but never started, tracked and removed like a sandbox.
    """
    container = backend.create_stopped(image)
    try:
        chunks = iter(backend.api.export(container, chunk_size=1 << 20))
        stream = io.BufferedReader(_ChunkReader(chunks), 1 << 20)
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                if member.isfile():
                    handle = archive.extractfile(member)
                    yield member.name.lstrip("./"), handle.read() if handle else b""
                elif member.isdir():
                    yield member.name.lstrip("./") + "/", b""
    except docker.errors.ImageNotFound as error:
        raise ImageNotFound(f"image {image!r} not found locally: build it first") from error
    finally:
        backend.remove(container)


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
