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


def _minilib_sdist(tmp_path: Path) -> Path:
    import tarfile

    archive = tmp_path / "minilib-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as sdist:
        sdist.add(MINILIB, arcname="minilib-1.0", filter=lambda info: None if "__pycache__" in info.name else info)
    return archive


def test_an_sdist_is_unpacked_and_named_by_its_top_directory_the_same_wherever_it_lies(tmp_path):
    archive = _minilib_sdist(tmp_path)
    checked = checkout(str(archive), None, tmp_path / "scratch")
    moved = shutil.copy(archive, tmp_path / "elsewhere.tar.gz")
    again = checkout(str(moved), None, tmp_path / "scratch2")
    assert checked.repo_name == "minilib-1.0" and (checked.root / "pyproject.toml").is_file()
    assert again.commit == checked.commit  # a rerun into the same store goes on where the last one stopped


def test_a_broken_sdist_says_so(tmp_path):
    broken = tmp_path / "broken-1.0.tar.gz"
    broken.write_bytes(b"not a tar at all")
    with pytest.raises(SynthError, match="cannot be unpacked .*download the sdist again"):
        checkout(str(broken), None, tmp_path / "scratch")
