"""Repositories a test writes from a dict of files (texts dedented), committed as a fresh clone has them, and prepared
for synthesis."""

import subprocess
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_files(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))
    return root


def committed_clone(root: Path, files: dict[str, str]) -> Path:
    """FILES written under ROOT and committed to a new git repository, with no tag: what a clone of it would hold."""
    write_files(root, files)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", root.name], check=True)
    return root


@contextmanager
def prepared_clone(clone: Path, settings, backend, tmp_path: Path) -> Iterator:
    """The RepoContext of CLONE (its images built as synthesis builds them), the images removed after."""
    from task_synth.validation.repo_context import prepare_repo

    images: list[str] = []
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    try:
        yield prepare_repo(str(clone), settings, backend, scratch, images)
    finally:
        for image in images:
            backend.remove_image(image)
