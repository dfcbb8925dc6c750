"""A clone's version from its tags, for build backends that read git when the checkout has no `.git` (no engine)."""

from pathlib import Path

import git
import pytest

from task_synth.repository.scm_version import UNTAGGED_VERSION, described_version, version_env, write_pkg_info
from task_synth.repository.source import checkout


def _repo(path: Path, *tags: str) -> git.Repo:
    repo = git.Repo.init(path)
    with repo.config_writer() as config:
        config.set_value("user", "name", "regrow").set_value("user", "email", "regrow@example.invalid")
    (path / "README").write_text("one\n")
    repo.index.add(["README"])
    repo.index.commit("one")
    for tag in tags:
        repo.create_tag(tag)
    return repo


@pytest.mark.parametrize(
    ("tags", "version"),
    [((), UNTAGGED_VERSION), (("v1.2.3",), "1.2.3"), (("release-2.0",), "2.0"), (("nightly",), UNTAGGED_VERSION)],
)
def test_a_clones_version_is_its_newest_tag_read_as_a_version(tmp_path, tags, version):
    assert described_version(_repo(tmp_path, *tags)) == version


def test_a_later_commit_still_builds_as_the_last_tag(tmp_path):
    repo = _repo(tmp_path, "v0.9.0")
    (tmp_path / "README").write_text("two\n")
    repo.index.add(["README"])
    repo.index.commit("two")
    assert described_version(repo) == "0.9.0"


def test_the_override_goes_only_where_no_pkg_info_carries_the_version(tmp_path):
    assert version_env(tmp_path, "1.0") == {"SETUPTOOLS_SCM_PRETEND_VERSION": "1.0", "PDM_BUILD_SCM_VERSION": "1.0"}
    assert version_env(tmp_path, None) == {}  # not a clone: a directory or an sdist
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: x\nVersion: 3.1\n")
    assert version_env(tmp_path, "1.0") == {}


def test_only_a_build_that_reads_git_gets_a_pkg_info(tmp_path):
    static, scm = tmp_path / "static", tmp_path / "scm"
    static.mkdir(), scm.mkdir()
    write_pkg_info(static, "static_pkg", "1.0", ["setuptools>=61"])
    write_pkg_info(scm, "scm_pkg", "1.0", ["setuptools>=64", "setuptools_scm[toml]>=8"])
    assert not (static / "PKG-INFO").exists()
    assert "Version: 1.0" in (scm / "PKG-INFO").read_text()


def test_checking_out_a_clone_keeps_its_tag_version_and_drops_its_history(tmp_path):
    _repo(tmp_path / "origin", "v4.5")
    checked = checkout(str(tmp_path / "origin"), None, tmp_path / "scratch")
    assert checked.scm_version == "4.5" and not (checked.root / ".git").exists()
    copied = checkout(str(checked.root), None, tmp_path / "scratch-copy")  # not a clone: nothing to read
    assert copied.scm_version is None
