"""`regrow synth --repos`: many repositories into one task store, resumable, each repository done once.

The store's `synth-state.json` records every finished repository (with tasks, or with the error that stopped it); a
rerun skips those and starts again with the first repository that did not finish.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbox import DockerBackend, SandboxError
from task_synth.errors import SynthError
from task_synth.pipeline import Progress, SynthReport, SynthStopped, synthesize
from task_synth.settings import SynthSettings

log = logging.getLogger(__name__)
STATE_FILE = "synth-state.json"


@dataclass
class RepoOutcome:
    """How one repository of a batch ended."""

    source: str
    status: str  # "done" or "failed"
    repo: str = ""
    valid: int = 0
    candidates: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    error: str = ""


def read_sources(path: Path) -> list[tuple[str, str | None]]:
    """(source, ref) per line of a repos file: `source [ref]`; blank lines and `#` comments are skipped."""
    if not path.is_file():
        raise SynthError(f"repos file {path} not found: pass a text file with one repository path or git URL per line")
    sources = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2:
            raise SynthError(f"{path}:{number}: expected `source [ref]`, got {line.strip()!r}")
        sources.append((words[0], words[1] if len(words) == 2 else None))
    if not sources:
        raise SynthError(f"repos file {path} lists no repository: add one path or git URL per line")
    return sources


def _key(source: str, ref: str | None) -> str:
    return f"{source}@{ref}" if ref else source


def read_state(store: Path) -> dict[str, RepoOutcome]:
    path = store / STATE_FILE
    if not path.is_file():
        return {}
    return {key: RepoOutcome(**value) for key, value in json.loads(path.read_text()).items()}


def _write_state(store: Path, state: dict[str, RepoOutcome]) -> None:
    store.mkdir(parents=True, exist_ok=True)
    partial = store / (STATE_FILE + ".partial")
    partial.write_text(json.dumps({key: asdict(value) for key, value in state.items()}, indent=1) + "\n")
    os.replace(partial, store / STATE_FILE)


def synthesize_many(
    sources: list[tuple[str, str | None]],
    store: Path,
    settings: SynthSettings,
    backend: DockerBackend | None = None,
    on_repo: Callable[[int, int, str], None] | None = None,
    on_progress: Progress | None = None,
) -> tuple[dict[str, RepoOutcome], list[SynthReport]]:
    """Synthesize up to `settings.max_tasks` tasks per repository into `store`; finished repositories are skipped.

    A repository that fails with a SynthError or SandboxError is recorded as failed and the batch goes on.
    """
    backend = backend or DockerBackend()
    state = read_state(store)
    reports = []
    for index, (source, ref) in enumerate(sources):
        key = _key(source, ref)
        if on_repo:
            on_repo(index, len(sources), key)
        if key in state:
            log.info("skipping %s: finished in an earlier run (%s)", key, state[key].status)
            continue
        started = time.monotonic()
        try:
            report = synthesize(source, store, settings.model_copy(update={"ref": ref}), backend, on_progress)
        except SynthStopped:
            raise  # the whole batch stops; a rerun goes on with this repository, where it stopped
        except (SynthError, SandboxError) as error:
            state[key] = RepoOutcome(key, "failed", wall_s=round(time.monotonic() - started, 1), error=str(error))
        else:
            reports.append(report)
            state[key] = RepoOutcome(
                key,
                "done",
                report.repo,
                report.valid + report.resumed,
                report.candidates,
                {reason: count for reason, count in report.rejections.items() if count},
                round(report.wall_s, 1),
            )
        _write_state(store, state)
    if on_repo:
        on_repo(len(sources), len(sources), "")
    return state, reports
