"""A primed import (a `tar -x` waiting in the container, fed at import time) writes exactly what the engine's own
unpacking writes: the same names, kinds, modes, owners, times, link targets and bytes; where it cannot (another
owner, another folder), the engine unpacks instead."""

import io
import tarfile

import pytest

from sandbox.layout import AGENT_UID, WORKSPACE
from sandbox.runtime.tree_receiver import agent_owned

_LISTING = (
    f"cd {WORKSPACE} && find . -printf '%p %y %m %U %G %s %T@ %l\\n' | sort"
    " && find . -type f -exec sha256sum {} + | sort"
)


def _listing(sandbox, last: bytes) -> list[str]:
    """Every path's kind, mode, owners, size, time and link target, and every file's digest; a folder the last
    archive does not hold has no time (it is the moment a child was written into it)."""
    held = {f"./{name.removeprefix('workspace/')}" for name in tarfile.open(fileobj=io.BytesIO(last)).getnames()}
    lines = []
    for line in sandbox.exec(["sh", "-c", _LISTING]).stdout.splitlines():
        fields = line.split(" ")
        if len(fields) > 2 and fields[1] == "d" and fields[0] not in held:
            fields[6] = "-"
        lines.append(" ".join(fields))
    return lines


def _running_tars(sandbox) -> int:
    return sandbox.exec(["sh", "-c", "cat /proc/[0-9]*/comm"]).stdout.split().count("tar")


def _archive(members: list[tuple[str, str, int, bytes | str | None]], uid: int = AGENT_UID) -> bytes:
    """A tar of (name, kind, mode, content) members owned by `uid`: kind "f" (bytes), "d" or "l" (target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, mode, content in members:
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.gid, info.mtime = mode, uid, uid, 1_700_000_000
            if kind == "d":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "l":
                info.type, info.linkname = tarfile.SYMTYPE, str(content)
                tar.addfile(info)
            else:
                assert isinstance(content, bytes)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


BASE = _archive(
    [
        ("workspace/pkg", "d", 0o755, None),
        ("workspace/pkg/ops.py", "f", 0o644, b"def f():\n    return 1\n"),
        ("workspace/.git", "d", 0o755, None),
        ("workspace/.git/objects", "d", 0o755, None),
        ("workspace/.git/objects/ab", "d", 0o755, None),
        ("workspace/.git/objects/ab/cdef", "f", 0o444, b"old object"),
        ("workspace/run.sh", "f", 0o755, b"#!/bin/sh\n"),
    ]
)
REST = _archive(
    [
        ("workspace/.git/objects/ab/cdef", "f", 0o444, b"a read-only object, replaced"),
        ("workspace/.git/objects/cd", "d", 0o755, None),
        ("workspace/.git/objects/cd/0123", "f", 0o444, b"a new object"),
        ("workspace/pkg/ops.py", "f", 0o600, b"def f():\n    raise NotImplementedError\n"),
        ("workspace/pkg/new", "d", 0o755, None),  # listed, as a workspace archive lists every folder
        ("workspace/pkg/new/deep.py", "f", 0o644, b"X = 1\n"),
        ("workspace/run.sh", "l", 0o777, "pkg/ops.py"),  # a file replaced by a link
    ]
)


def test_agent_owned_reads_every_members_owner():
    assert agent_owned(REST)
    assert not agent_owned(_archive([("workspace/x", "f", 0o644, b"x")], uid=0))
    assert not agent_owned(b"not a tar at all")


@pytest.mark.docker
def test_a_primed_import_writes_what_the_engines_unpacking_writes(docker_backend, base_image, caplog):
    with docker_backend.create(base_image) as primed, docker_backend.create(base_image) as plain:
        listings = []
        for sandbox, prime in ((primed, True), (plain, False)):
            sandbox.import_tree("/", BASE)
            if prime:
                sandbox.prime_import("/")
            sandbox.import_tree("/", REST)
            listings.append(_listing(sandbox, REST))
        assert any(line.startswith("./pkg/new/deep.py f 644 1000 1000 6 1700000000") for line in listings[1])
        assert any(line.startswith("./run.sh l 777") and line.endswith(" pkg/ops.py") for line in listings[1])
        assert listings[0] == listings[1]
        assert _running_tars(primed) == 0  # the receiver ended with its archive
        assert "primed import" not in caplog.text  # it wrote the tree itself, with no fallback to the engine


@pytest.mark.docker
def test_a_primed_import_hands_another_owner_or_folder_to_the_engine(docker_backend, base_image):
    with docker_backend.create(base_image) as sandbox:
        sandbox.prime_import("/")
        assert _running_tars(sandbox) == 1  # waiting for its archive
        sandbox.import_tree("/", _archive([("workspace/root-owned.txt", "f", 0o644, b"r")], uid=0))
        assert sandbox.exec(["stat", "-c", "%u", f"{WORKSPACE}/root-owned.txt"]).stdout.strip() == "0"
        sandbox.prime_import("/")
        sandbox.import_tree(WORKSPACE, _archive([("elsewhere.txt", "f", 0o644, b"e")]))
        assert sandbox.read_file(f"{WORKSPACE}/elsewhere.txt") == b"e"
        assert _running_tars(sandbox) == 0  # the unfed receiver ended too
