"""The repo image of a repository's dependencies and test tools, from its wheelhouse, in two stages: `build`, where
the baseline installs the workspace editable once, and the task image every task runs in, without pip."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from pathlib import Path

from proto.task_files import WHEELS
from sandbox import DockerBackend, ImageBuildFailed
from sandbox.lifecycle.base_image import BASE_IMAGE
from task_synth.errors import SynthError
from task_synth.repository import build_tools
from task_synth.repository.editable_install import pip_error_lines
from task_synth.repository.wheelhouse import BUILD_ONLY

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


def build_stage_tag(tag: str) -> str:
    """The repo image's build stage: pip and the build tools are still in it."""
    return f"{tag}-build"


def _build(
    backend: DockerBackend,
    context: Path,
    dockerfile: str,
    tag: str,
    buildargs: dict[str, str],
    labels: dict[str, str],
    target: str | None = None,
) -> None:
    shutil.copy(DOCKERFILES / dockerfile, context / "Dockerfile")
    try:
        backend.build_image(context, tag, buildargs, labels, target)
    except ImageBuildFailed as error:
        detail = " | ".join(pip_error_lines(error.output))
        raise SynthError(
            f"building image {tag} failed ({detail}): check that the wheelhouse holds every dependency"
        ) from error


class RepoImageBuild:
    """One repo image's two stages, built from one context: the build stage first, then the task stage, which may be
    built beside the editable install that runs in the build stage. Use it as a context manager (the context's files
    go on the way out); `needed` is False when both stages exist already, and then building is a no-op."""

    def __init__(self, backend: DockerBackend, tag: str, wheelhouse: Path):
        self.backend, self.tag, self.wheelhouse = backend, tag, wheelhouse
        self.needed = not (backend.image_exists(tag) and backend.image_exists(build_stage_tag(tag)))
        self._scratch: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> RepoImageBuild:
        if self.needed:
            self._scratch = tempfile.TemporaryDirectory(prefix="regrow-repo-image-")
            context = Path(self._scratch.name)
            shutil.copytree(self.wheelhouse, context / "wheels")
            # What the task stage needs to drop the build's tools (the build stage keeps it, with the project's wheel).
            strip = context / "wheels" / "strip"
            strip.mkdir()
            shutil.copy(build_tools.__file__, strip / "build_tools.py")
            if (self.wheelhouse / BUILD_ONLY).is_file():  # a wheelhouse older than the list: pip goes, installers stay
                shutil.copy(self.wheelhouse / BUILD_ONLY, strip / BUILD_ONLY)
            else:
                (strip / BUILD_ONLY).touch()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()

    def build_stage(self) -> None:
        if self._scratch is not None:
            log.info("building %s", self.tag)
            # No labels: the builder would add a step for them to each stage; every container gets SYNTH_LABEL
            self._build(build_stage_tag(self.tag), target="build")

    def task_stage(self) -> None:
        if self._scratch is not None:
            self._build(self.tag)  # the build stage's steps come from the builder's cache

    def _build(self, tag: str, target: str | None = None) -> None:
        assert self._scratch is not None
        context, arguments = Path(self._scratch.name), {"BASE_IMAGE": BASE_IMAGE}
        _build(self.backend, context, "repo.Dockerfile", tag, arguments, {}, target=target)


def build_repo_image(backend: DockerBackend, tag: str, wheelhouse: Path) -> bool:
    """Build the repo image's two stages (`tag` and its build stage) unless both exist; True when this call built."""
    with RepoImageBuild(backend, tag, wheelhouse) as image:
        image.build_stage()
        image.task_stage()
    return image.needed


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
