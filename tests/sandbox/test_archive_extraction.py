"""Hostile archives are refused with a clear error on every Python regrow supports, and write nothing outside their
destination: path traversal, absolute names, links out (also through a link the archive made), hard links out,
devices and pipes, and a zip slip. Each case runs in a fresh process of every interpreter the machine has (Debian's
own 3.11.2 has no tarfile filter; 3.12 and later have it), with the extraction module loaded alone."""

import io
import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from sandbox import archive_extraction
from sandbox.archive_extraction import UnsafeArchive, extract_archive
from tests.support.pythons import supported_pythons

MODULE = Path(archive_extraction.__file__)


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info, None


def _zip(*names: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pkg-1.0/setup.py", "")
        for name in names:
            archive.writestr(zipfile.ZipInfo(name), "pwned")
    return buffer.getvalue()


OK = _file("pkg-1.0/setup.py")
HOSTILE = {
    "traversal": _tar(OK, _file("pkg-1.0/../../escaped")),
    "absolute": _tar(OK, _file("/tmp/regrow-absolute-escape")),
    "symlink_out": _tar(OK, _special("pkg-1.0/out", tarfile.SYMTYPE, "../../..")),
    "absolute_symlink": _tar(OK, _special("pkg-1.0/etc", tarfile.SYMTYPE, "/etc")),
    "write_through_symlink": _tar(
        _special("pkg-1.0/up", tarfile.SYMTYPE, ".."),
        _special("pkg-1.0/up/up", tarfile.SYMTYPE, ".."),
        _file("pkg-1.0/up/up/escaped"),
    ),
    "hardlink_out": _tar(OK, _special("pkg-1.0/passwd", tarfile.LNKTYPE, "../../etc/passwd")),
    "char_device": _tar(OK, _special("pkg-1.0/null", tarfile.CHRTYPE)),
    "fifo": _tar(OK, _special("pkg-1.0/pipe", tarfile.FIFOTYPE)),
    "zip_slip": _zip("../escaped"),
    "zip_absolute": _zip("/tmp/regrow-zip-absolute-escape"),
}
# What a real sdist may hold, and which must unpack as it is.
BENIGN = _tar(
    _special("pkg-1.0", tarfile.DIRTYPE),
    _file("pkg-1.0/setup.py"),
    _file("pkg-1.0/run.sh", b"#!/bin/sh\n", 0o4755),
    _special("pkg-1.0/docs", tarfile.SYMTYPE, "doc"),
    _file("pkg-1.0/doc/index.rst"),
    _special("pkg-1.0/README", tarfile.LNKTYPE, "pkg-1.0/setup.py"),
)

# Runs in each interpreter: the module alone, each case into its own folder; prints what happened, as JSON.
DRIVER = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("archive_extraction", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
outcomes = {}
for name, archive, destination in json.loads(sys.argv[2]):
    try:
        module.extract_archive(archive, destination)
        outcomes[name] = "unpacked"
    except module.UnsafeArchive as error:
        outcomes[name] = "refused: " + str(error)
print(json.dumps(outcomes))
"""


def _everything_under(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.fixture(scope="module")
def interpreters():
    found = supported_pythons()
    if Path("/usr/bin/python3").exists():  # the floor as Debian ships it: bookworm's 3.11.2 has no tarfile filter
        assert any(path == "/usr/bin/python3" for path, _ in found), found
    return found


def test_every_hostile_archive_is_refused_and_nothing_lands_outside_on_every_interpreter(tmp_path, interpreters):
    for python, version in interpreters:
        outer = tmp_path / version
        cases = []
        for name, data in HOSTILE.items():
            archive = outer / f"{name}.archive"
            archive.parent.mkdir(parents=True, exist_ok=True)
            archive.write_bytes(data)
            cases.append((name, str(archive), str(outer / "cases" / name / "a" / "b" / "dest")))
        before = _everything_under(outer)
        ran = subprocess.run([python, "-I", "-c", DRIVER, str(MODULE), json.dumps(cases)], capture_output=True)
        assert ran.returncode == 0, (python, ran.stderr.decode())
        outcomes = json.loads(ran.stdout)
        for name in HOSTILE:
            assert outcomes[name].startswith("refused: "), (version, name, outcomes[name])
            assert "member " in outcomes[name], (version, name, outcomes[name])  # it names the member
            # Nothing at all is written: the whole archive is checked before its first member.
            assert _everything_under(outer / "cases" / name) == {"a", "a/b", "a/b/dest"}, (version, name)
        assert _everything_under(outer) - before == {
            f"cases/{name}{tail}" for name in HOSTILE for tail in ("", "/a", "/a/b", "/a/b/dest")
        } | {"cases"}
    assert not Path("/tmp/regrow-absolute-escape").exists() and not Path("/tmp/regrow-zip-absolute-escape").exists()


def test_a_benign_archive_unpacks_with_its_links_and_without_special_bits_on_every_interpreter(tmp_path, interpreters):
    archive = tmp_path / "benign.tar.gz"
    archive.write_bytes(BENIGN)
    for python, version in interpreters:
        destination = tmp_path / version
        cases = json.dumps([("benign", str(archive), str(destination))])
        ran = subprocess.run([python, "-I", "-c", DRIVER, str(MODULE), cases], capture_output=True, check=True)
        assert json.loads(ran.stdout) == {"benign": "unpacked"}, version
        top = destination / "pkg-1.0"
        assert (top / "docs").is_symlink() and os.readlink(top / "docs") == "doc"
        assert (top / "README").read_bytes() == b"x"
        mode = (top / "run.sh").stat().st_mode
        assert mode & 0o100 and not mode & 0o4000, (version, oct(mode))  # executable, no setuid


def test_an_archive_given_as_bytes_is_refused_in_process_with_the_member_named(tmp_path):
    with pytest.raises(UnsafeArchive, match=r"member '/tmp/regrow-absolute-escape' has an absolute path"):
        extract_archive(HOSTILE["absolute"], tmp_path / "dest")
    assert _everything_under(tmp_path) == {"dest"}
