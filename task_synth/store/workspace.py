"""The task workspace on the host: the deleted state as a fresh single-commit git repository, and the solution patch."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import git

from task_synth.candidates.deletion import Deletion
from task_synth.repository.source import CACHE_NAMES

# Fixed identity and dates make the workspace commit, and so the task, reproducible.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "regrow",
    "GIT_AUTHOR_EMAIL": "regrow@localhost",
    "GIT_COMMITTER_NAME": "regrow",
    "GIT_COMMITTER_EMAIL": "regrow@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


def _write_state(root: Path, files: Mapping[str, str | None]) -> None:
    for path, text in files.items():
        target = root / path
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")


def _commit_all(repo: git.Repo, message: str) -> None:
    with repo.git.custom_environment(**GIT_ENV):
        repo.git.add("-A", "--force")
        repo.git.commit("-q", "--no-gpg-sign", "--allow-empty", "-m", message)


# An empty --template keeps sample hooks out (gitpython calls --template unsafe only for untrusted values).
def build_workspace(checkout: Path, deletion: Deletion, destination: Path) -> Path:
    """Copy the clean checkout, apply the deletion, and commit it as the one and only commit."""
    shutil.copytree(checkout, destination, ignore=shutil.ignore_patterns(*CACHE_NAMES, ".git"), symlinks=True)
    _write_state(destination, deletion.changed)
    repo = git.Repo.init(destination, initial_branch="main", template="", allow_unsafe_options=True)
    _commit_all(repo, "Task workspace")
    # One pack instead of a file per object, and no reflog: a reset writes a few entries, not hundreds.
    repo.git.repack("-a", "-d", "-q", "-n")
    repo.git.prune_packed("-q")
    repo.close()
    shutil.rmtree(destination / ".git" / "logs", ignore_errors=True)
    return destination


def solution_patch(deletion: Deletion) -> str:
    """A `git apply`-able patch from the deleted state of the changed files back to the original."""
    with tempfile.TemporaryDirectory(prefix="regrow-patch-") as scratch:
        root = Path(scratch)
        repo = git.Repo.init(root, template="", allow_unsafe_options=True)
        _write_state(root, deletion.changed)
        _commit_all(repo, "deleted")
        _write_state(root, dict(deletion.original))
        with repo.git.custom_environment(**GIT_ENV):
            repo.git.add("-A")
            patch = repo.git.diff("--cached", "--binary", "--no-color", "--no-ext-diff")
        repo.close()
    return patch + "\n"
