"""The repo image (deps + test tools from the wheelhouse) and the thin task images built on it."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from pathlib import Path

from proto.task_files import WHEELS
from sandbox import DockerBackend, ImageBuildFailed
from sandbox.base_image import BASE_IMAGE
from task_synth.errors import SynthError
from task_synth.suite_runs import pip_error_lines

log = logging.getLogger(__name__)
# Beside the modules, so that the package-data pattern "*.Dockerfile" ships them in the wheel.
DOCKERFILES = Path(__file__).parent
SYNTH_LABEL = "regrow.synth"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.") or "repo"


def repo_image_tag(repo_name: str, wheelhouse_key: str) -> str:
    """Keyed by the dependency set and the base, not the commit: the image holds no source, so commits with the same
    deps share it."""
    return f"regrow/repo-{slug(repo_name)}:{wheelhouse_key}-{BASE_IMAGE.partition(':')[2]}"


def _build(
    backend: DockerBackend, context: Path, dockerfile: str, tag: str, buildargs: dict[str, str], labels: dict[str, str]
) -> None:
    shutil.copy(DOCKERFILES / dockerfile, context / "Dockerfile")
    try:
        backend.build_image(context, tag, buildargs, labels)
    except ImageBuildFailed as error:
        detail = " | ".join(pip_error_lines(error.output))
        raise SynthError(
            f"building image {tag} failed ({detail}): check that the wheelhouse holds every dependency"
        ) from error


def build_repo_image(backend: DockerBackend, tag: str, wheelhouse: Path) -> bool:
    """Build the repo image unless it exists; returns True when this call built it."""
    if backend.image_exists(tag):
        return False
    with tempfile.TemporaryDirectory(prefix="regrow-repo-image-") as context:
        shutil.copytree(wheelhouse, Path(context) / "wheels")
        log.info("building %s", tag)
        _build(backend, Path(context), "repo.Dockerfile", tag, {"BASE_IMAGE": BASE_IMAGE}, {SYNTH_LABEL: "repo"})
    return True


def build_store_images(backend: DockerBackend, records: list, store: Path) -> dict[str, bool]:
    """Build each repository image a task store needs from the wheels it carries; tag -> whether this call built it.

    Raises SynthError when a store's wheels are missing (a store written before tasks were files needs re-synthesis).
    """
    wanted = {record.image: record.repo_dir for record in records if record.repo_dir}
    built = {}
    for tag, folder in sorted(wanted.items()):
        wheels = store / folder / WHEELS
        if not wheels.is_dir() and not backend.image_exists(tag):
            raise SynthError(f"{wheels} is missing, so {tag} cannot be rebuilt: copy the whole task store")
        built[tag] = build_repo_image(backend, tag, wheels)
    return built
