"""One contract, two sandboxes: the in-memory fake behaves as the Docker sandbox does, so tests built on it hold on
the real engine. The memory half runs in the fast lane; the Docker half checks the same assertions on the engine."""

import io
import tarfile

import pytest

from sandbox import FileTooLarge, Limits, Sandbox, SandboxFileNotFound, SandboxGone
from sandbox.layout import WORKSPACE
from sandbox.lifecycle.memory_backend import MemoryBackend
from sandbox.runtime.memory_sandbox import MemorySandbox

SMALL = Limits(file_size_bytes=4096, output_cap_bytes=1024)


@pytest.fixture(params=["memory", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(request):
    if request.param == "memory":
        made = MemorySandbox(limits=SMALL)
        made.write_file(f"{WORKSPACE}/.keep", b"")
    else:
        backend, image = request.getfixturevalue("docker_backend"), request.getfixturevalue("base_image")
        made = backend.create(image, limits=SMALL, workdir=WORKSPACE)
    with made:
        yield made


def _tar(members: dict[str, bytes | str]) -> bytes:
    """A tar archive: bytes are files, a str is a symbolic link's target."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def test_both_implement_the_sandbox_protocol(sandbox):
    assert isinstance(sandbox, Sandbox)


def test_a_written_file_reads_back_byte_for_byte_with_its_parents_made(sandbox):
    payload = bytes(range(256)) * 4
    sandbox.write_file(f"{WORKSPACE}/deep/er/data.bin", payload)
    assert sandbox.read_file(f"{WORKSPACE}/deep/er/data.bin") == payload
    sandbox.write_file(f"{WORKSPACE}/deep/text.txt", "héllo\n")
    assert sandbox.read_file(f"{WORKSPACE}/deep/text.txt") == "héllo\n".encode()


def test_missing_files_directories_and_oversized_files_are_typed_errors(sandbox):
    with pytest.raises(SandboxFileNotFound):
        sandbox.read_file(f"{WORKSPACE}/nope.txt")
    with pytest.raises(IsADirectoryError):
        sandbox.read_file(WORKSPACE)
    with pytest.raises(FileTooLarge):
        sandbox.write_file(f"{WORKSPACE}/big.bin", b"x" * (SMALL.file_size_bytes + 1))
    with pytest.raises(ValueError, match="absolute"):
        sandbox.read_file("relative.txt")


def test_list_dir_puts_directories_first_then_names_in_order(sandbox):
    for path in ("b.txt", "a.txt", "zdir/x", "adir/y"):
        sandbox.write_file(f"{WORKSPACE}/{path}", b"12345")
    entries = [(entry.name, entry.kind) for entry in sandbox.list_dir(WORKSPACE) if entry.name != ".keep"]
    assert entries == [("adir", "dir"), ("zdir", "dir"), ("a.txt", "file"), ("b.txt", "file")]
    assert next(entry.size for entry in sandbox.list_dir(WORKSPACE) if entry.name == "a.txt") == 5
    with pytest.raises(SandboxFileNotFound):
        sandbox.list_dir(f"{WORKSPACE}/missing")
    with pytest.raises(NotADirectoryError):
        sandbox.list_dir(f"{WORKSPACE}/a.txt")


def test_search_answers_as_grep_does_and_skips_git(sandbox):
    sandbox.write_file(f"{WORKSPACE}/pkg/mod.py", "def area(r):\n    return 3 * r * r\n")
    sandbox.write_file(f"{WORKSPACE}/.git/HEAD", "def area in git\n")
    found = sandbox.search(r"def \w+", WORKSPACE)
    assert found.exit_code == 0
    assert found.stdout.splitlines() == [f"{WORKSPACE}/pkg/mod.py:1:def area(r):"]
    assert sandbox.search("nothing-like-this", WORKSPACE).exit_code == 1


def test_an_exported_tree_imports_into_another_sandbox_as_it_was(sandbox):
    sandbox.write_file(f"{WORKSPACE}/pkg/__init__.py", "X = 1\n")
    archive = b"".join(sandbox.export_tree(WORKSPACE, max_bytes=1 << 20))
    names = tarfile.open(fileobj=io.BytesIO(archive)).getnames()
    assert "workspace/pkg/__init__.py" in names and all(name.startswith("workspace") for name in names)
    with pytest.raises(FileTooLarge):
        b"".join(sandbox.export_tree(WORKSPACE, max_bytes=100))
    other = MemorySandbox()
    other.import_tree("/", archive)
    assert other.read_file("/workspace/pkg/__init__.py") == b"X = 1\n"


def test_imported_links_are_followed_when_read(sandbox):
    sandbox.import_tree(WORKSPACE, _tar({"real.txt": b"target\n", "alias.txt": "real.txt"}))
    assert sandbox.read_file(f"{WORKSPACE}/alias.txt") == b"target\n"
    kinds = {entry.name: entry.kind for entry in sandbox.list_dir(WORKSPACE)}
    assert kinds["alias.txt"] == "link"


def test_a_frozen_sandbox_keeps_its_files_readable_and_runs_nothing(sandbox):
    sandbox.write_file(f"{WORKSPACE}/kept.txt", "kept\n")
    sandbox.freeze()
    assert sandbox.read_file(f"{WORKSPACE}/kept.txt") == b"kept\n"
    assert b"".join(sandbox.export_tree(WORKSPACE, max_bytes=1 << 20))
    with pytest.raises(SandboxGone):
        sandbox.exec("true")


def test_destroy_is_safe_twice(sandbox):
    sandbox.destroy()
    sandbox.destroy()


def test_the_memory_backend_makes_sandboxes_from_file_trees_and_tracks_them():
    backend = MemoryBackend({"repo:1": {"/workspace/a.py": "A = 1\n"}})
    with backend.create("repo:1", labels={"regrow.pool": "repo:1"}) as made:
        assert made.read_file("/workspace/a.py") == b"A = 1\n"
        assert backend.live_ids() == {made.id}
        assert [c["Id"] for c in backend.containers_labelled({"regrow.pool": "repo:1"})] == [made.id]
    assert backend.live_ids() == set()


def test_memory_commands_are_answered_by_the_script_and_capped_like_docker():
    from sandbox import ExecResult

    def commands(command, sandbox):
        return ExecResult(0, "x" * 5000, "", False, False, 0.0)

    made = MemorySandbox(limits=SMALL, commands=commands)
    result = made.exec("yes | head")
    assert made.executed == [["sh", "-c", "yes | head"]]
    assert result.truncated and len(result.stdout) == SMALL.output_cap_bytes
    assert MemorySandbox().exec(["git", "status"]).exit_code == 127


def test_the_transcript_names_the_workspace_every_sandbox_has():
    from proto.transcript import WORKSPACE as PROMPTED

    assert PROMPTED == WORKSPACE


def test_realpath_resolves_links_out_of_the_workspace_as_the_tools_check_them(sandbox):
    sandbox.import_tree(WORKSPACE, _tar({"out": "/etc", "inner": "pkg", "pkg/mod.py": b""}))
    resolved = {
        path: sandbox.exec(["realpath", "-m", "--", f"{WORKSPACE}/{path}"]).stdout.strip()
        for path in ("out/passwd", "inner/mod.py", "missing/x")
    }
    assert resolved == {
        "out/passwd": "/etc/passwd",
        "inner/mod.py": f"{WORKSPACE}/pkg/mod.py",
        "missing/x": f"{WORKSPACE}/missing/x",
    }
