"""File I/O through tar archives: binary-safe, size-limited, typed errors."""

import os

import pytest

from sandbox import FileTooLarge, SandboxFileNotFound

MiB = 1024 * 1024


def test_binary_file_round_trips_byte_for_byte(sandbox):
    payload = bytes(range(256)) * 64 + b"\0\xff\xfe"
    sandbox.write_file("/workspace/data/blob.bin", payload)
    assert sandbox.read_file("/workspace/data/blob.bin") == payload


def test_five_mib_file_round_trips(sandbox):
    payload = os.urandom(5 * MiB)
    sandbox.write_file("/workspace/big.bin", payload)
    assert sandbox.read_file("/workspace/big.bin") == payload


def test_written_files_belong_to_the_agent(sandbox):
    sandbox.write_file("/workspace/new/dir/a.py", "x = 1\n")
    assert sandbox.exec("stat -c %u:%g /workspace/new/dir/a.py").stdout.strip() == "1000:1000"
    assert sandbox.exec("echo more >> /workspace/new/dir/a.py").exit_code == 0


def test_oversized_write_gets_a_clear_error(sandbox):
    with pytest.raises(FileTooLarge, match="over the 5242880-byte file limit"):
        sandbox.write_file("/workspace/huge.bin", b"x" * (5 * MiB + 1))


def test_oversized_read_gets_a_clear_error(sandbox):
    sandbox.exec("head -c 6000000 /dev/zero > /workspace/huge.bin")
    with pytest.raises(FileTooLarge):
        sandbox.read_file("/workspace/huge.bin")


def test_missing_path_raises_typed_error(sandbox):
    with pytest.raises(SandboxFileNotFound):
        sandbox.read_file("/workspace/nope.txt")
    with pytest.raises(SandboxFileNotFound):
        sandbox.list_dir("/workspace/nope")


def test_symlinked_file_reads_its_target(sandbox):
    sandbox.write_file("/workspace/real.txt", "target\n")
    sandbox.exec("ln -s real.txt /workspace/link.txt")
    assert sandbox.read_file("/workspace/link.txt") == b"target\n"


def test_list_dir_reports_kinds_and_sizes(sandbox):
    sandbox.write_file("/workspace/pkg/mod.py", "abc")
    entries = {entry.name: entry for entry in sandbox.list_dir("/workspace/pkg")}
    assert entries["mod.py"].kind == "file" and entries["mod.py"].size == 3
    assert [e.kind for e in sandbox.list_dir("/workspace")] == ["dir"]


def test_search_finds_lines_with_numbers(sandbox):
    sandbox.write_file("/workspace/s/a.py", "one\ndef target():\n    pass\n")
    result = sandbox.search(r"def \w+\(", "/workspace/s")
    assert result.exit_code == 0
    assert result.stdout.strip() == "/workspace/s/a.py:2:def target():"


def test_relative_paths_are_refused(sandbox):
    with pytest.raises(ValueError, match="absolute"):
        sandbox.read_file("workspace/a.py")
