"""Reading an image's files needs a container only until its export has begun: one killed mid-read leaves none."""

import io
import tarfile

from sandbox.lifecycle.images import export_begun, tar_files
from sandbox.lifecycle.owner import OWNER_LABEL


def _tar_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        folder = tarfile.TarInfo("etc")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


class _ExportingEngine:
    """An engine's export of one container, in small chunks, counting how many the caller has read."""

    def __init__(self, archive: bytes, chunk: int = 512):
        self.chunks = [archive[start : start + chunk] for start in range(0, len(archive), chunk)]
        self.read = 0

    def export(self, container: str, chunk_size: int):
        for piece in self.chunks:
            self.read += 1
            yield piece


def test_an_export_has_begun_when_export_begun_returns():
    engine = _ExportingEngine(_tar_of({"etc/hostname": b"box\n"}))
    chunks = export_begun(engine, "c0ffee", "regrow/base:test")  # type: ignore[arg-type]
    assert engine.read == 1  # the engine holds the files now: removing the container cannot cut the export short
    assert b"".join(chunks) == b"".join(engine.chunks)


def test_tar_files_reads_files_and_folders_across_chunk_boundaries():
    files = {"etc/hostname": b"box\n", "etc/big": bytes(range(256)) * 20}
    engine = _ExportingEngine(_tar_of(files), chunk=100)
    read = dict(tar_files(export_begun(engine, "c0ffee", "regrow/base:test")))  # type: ignore[arg-type]
    assert read == {"etc/": b"", **files}


def test_image_files_removes_its_container_before_the_first_file(docker_backend, base_image):
    """A scan of the repository image runs beside the baseline for minutes: a synth run SIGTERMed, or killed after
    its grace period, meanwhile left the scan's container behind."""

    def scan_containers() -> list[dict]:
        owned = docker_backend.containers_labelled({OWNER_LABEL: docker_backend.owner})
        return [c for c in owned if c.get("Image") == base_image]

    files = docker_backend.image_files(base_image)
    first = next(files)
    assert scan_containers() == []
    read = dict([first, *files])
    assert b"agent:" in read["etc/passwd"] and b"Debian" in read["usr/lib/os-release"]  # read after the removal
    assert scan_containers() == []
