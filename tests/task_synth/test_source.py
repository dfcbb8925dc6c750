"""Checking out a source: git URLs at a ref (gitpython), plain directories, and the errors for bad input."""

import shutil
from pathlib import Path

import git
import pytest

from task_synth.errors import SynthError
from task_synth.repository.source import checkout
from task_synth.store.workspace import GIT_ENV

MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"


@pytest.fixture
def minilib_repo(tmp_path) -> tuple[Path, str, str]:
    """A git clone-able copy of minilib with two commits; the first is tagged v1."""
    root = tmp_path / "origin" / "minilib"
    shutil.copytree(MINILIB, root)
    repo = git.Repo.init(root, initial_branch="main")
    with repo.git.custom_environment(**GIT_ENV):
        repo.git.add("-A")
        repo.git.commit("-q", "-m", "first")
        first = repo.head.commit.hexsha
        repo.create_tag("v1")
        (root / "CHANGES.txt").write_text("second\n")
        repo.git.add("-A")
        repo.git.commit("-q", "-m", "second")
    return root, first, repo.head.commit.hexsha


def test_git_url_is_cloned_at_the_ref(minilib_repo, tmp_path):
    root, first, _ = minilib_repo
    checked = checkout(f"file://{root}", "v1", tmp_path / "scratch")
    assert checked.commit == first and checked.repo_name == "minilib"
    assert not (checked.root / "CHANGES.txt").exists() and not (checked.root / ".git").exists()


def test_local_clone_defaults_to_head(minilib_repo, tmp_path):
    root, _, head = minilib_repo
    assert checkout(str(root), None, tmp_path / "scratch").commit == head


def test_unknown_ref_is_a_one_line_error(minilib_repo, tmp_path):
    root, _, _ = minilib_repo
    with pytest.raises(SynthError, match="cannot clone .* at no-such-tag .*check the URL or path and --ref"):
        checkout(str(root), "no-such-tag", tmp_path / "scratch")


def test_plain_directory_gets_a_stable_content_id_and_no_caches(tmp_path):
    copy = tmp_path / "minilib"
    shutil.copytree(MINILIB, copy)
    (copy / "src" / "minilib" / "__pycache__").mkdir(exist_ok=True)  # an earlier import may have made it
    (copy / "src" / "minilib" / "__pycache__" / "textops.cpython-311.pyc").write_bytes(b"stale")
    first = checkout(str(copy), None, tmp_path / "a")
    second = checkout(str(MINILIB), None, tmp_path / "b")
    assert first.commit == second.commit
    assert not list(first.root.rglob("__pycache__"))


def test_ref_on_a_plain_directory_is_refused(tmp_path):
    with pytest.raises(SynthError, match="needs a git repository"):
        checkout(str(MINILIB), "v1", tmp_path / "scratch")
