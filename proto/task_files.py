"""The task store on disk, the contract between `regrow synth` (which writes it) and the server (which reads it).

tasks.jsonl  tasks.parquet      one TaskRecord per line; the Parquet copy is for `datasets`
workspaces/<id>.tar.gz          what a reset writes into /workspace
hidden/<id>/                    tests/ (pristine), solution.patch, io_checks.json: the grader's, never the agent's
twins.jsonl                     impossible twins (the server mixes them into resets); hidden/<twin id>/twin_of
repos/<repo>-<commit>/          install.tar.gz (the editable install's files) and wheels/ (rebuilds the image)
synth-journal/<snapshot>.jsonl  the candidates `regrow synth` judged per snapshot, so that a rerun goes on from there
"""

from __future__ import annotations

from pathlib import Path

from proto.tasks import TaskRecord

RECORDS = "tasks.jsonl"
PARQUET = "tasks.parquet"
INSTALL_ARCHIVE = "install.tar.gz"
WHEELS = "wheels"
SOLUTION_PATCH = "solution.patch"
IO_CHECKS = "io_checks.json"
PRISTINE_TESTS = "tests"
TWINS = "twins.jsonl"
TWIN_OF = "twin_of"


def workspace_archive(instance_id: str) -> str:
    """Relative to the store, as a record's `workspace_archive` names it."""
    return f"workspaces/{instance_id}.tar.gz"


def repo_dir(repo_slug: str, commit: str) -> str:
    """Relative to the store: what every task of one repository snapshot shares."""
    return f"repos/{repo_slug}-{commit[:12]}"


def install_archive(repo_dir: str) -> str:
    """Relative to the store: the editable install's files of a repository snapshot."""
    return f"{repo_dir}/{INSTALL_ARCHIVE}"


def hidden_dir(store: Path, instance_id: str) -> Path:
    return store / "hidden" / instance_id


def read_records(store: Path, name: str = RECORDS) -> list[TaskRecord]:
    """The store's records (or its twins', with `name=TWINS`) in file order; none when it has no such file yet."""
    path = store / name
    if not path.exists():
        return []
    return [TaskRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]
