"""Everything per repository that every candidate shares: the prepared repository (repository/prepared_repo.py) with
its baseline, the index of its repo image and the sandboxes validation runs in; and how `prepare_repo` makes it."""

from __future__ import annotations

import email.parser
import logging
import queue
import shlex
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import DockerBackend, Sandbox
from sandbox.layout import WORKSPACE
from sandbox.lifecycle.base_image import BASE_IMAGE
from task_synth.errors import SynthError
from task_synth.repository.editable_install import seed_workspace, tree_archive
from task_synth.repository.image_python import image_python_version
from task_synth.repository.prepared_repo import SANDBOX_LIMITS, PreparedRepo
from task_synth.repository.pytest_compat import dropped_doctests, kept_options, project_addopts
from task_synth.repository.repo_image import SYNTH_LABEL, RepoImageBuild, build_stage_tag, repo_image_tag
from task_synth.repository.repo_layout import read_layout
from task_synth.repository.scm_version import write_pkg_info
from task_synth.repository.source import checkout
from task_synth.repository.wheelhouse import build_system, build_wheelhouse, project_name
from task_synth.settings import DEFAULT_TEST_COMMAND, SynthSettings
from task_synth.stage_clock import StageClock
from task_synth.validation.baseline import Baseline, run_baseline
from task_synth.validation.canary_scan import Hit, ImageIndex, cached_index
from task_synth.validation.fork_server import start_fork_server
from task_synth.validation.suite_runs import SERVER_ENV

log = logging.getLogger(__name__)

# The whole image scan, run beside the install and the baseline; the stage "image scan" is what is left to wait for.
IMAGE_SCAN_BESIDE = "image scan (beside baseline)"
TASK_IMAGE_BESIDE = "task image (beside editable install)"


@dataclass(kw_only=True)
class RepoContext(PreparedRepo):
    """One repository at one commit, ready for candidates to be validated against its baseline."""

    baseline: Baseline
    image_index: ImageIndex = field(default_factory=ImageIndex)

    def sandbox(self) -> Sandbox:
        """A sandbox of the task image with the original workspace in it, as a reset makes one: the captured editable
        install and the checkout are written in, and no pip runs."""
        sb = self.backend.create(
            self.repo_image, limits=SANDBOX_LIMITS, labels={SYNTH_LABEL: "validate"}, workdir=WORKSPACE
        )
        try:
            seed_workspace(sb, self.install_archive, tree_archive(self.checkout.root, f"{WORKSPACE.lstrip('/')}/"))
            if self.settings.fork_server and not self.baseline.runner_packages:
                start_fork_server(sb, SERVER_ENV)
        except BaseException:
            sb.destroy()
            raise
        return sb

    @contextmanager
    def sandbox_pool(self, size: int) -> Iterator[queue.Queue[Sandbox]]:
        """`size` ready sandboxes in a queue; all destroyed on exit."""
        made: list[Sandbox] = []
        pool: queue.Queue[Sandbox] = queue.Queue()
        try:
            for _ in range(size):
                made.append(self.sandbox())
                pool.put(made[-1])
            yield pool
        finally:
            for sb in made:
                sb.destroy()


def with_project_options(settings: SynthSettings, root: Path) -> SynthSettings:
    """The settings with the default test command given the project's own import options (a user's command is kept)."""
    addopts = project_addopts(root)
    if dropped_doctests(addopts):
        log.info("%s asks for doctests; tasks do not run them, since the agent edits the files they live in", root.name)
    kept = kept_options(addopts)
    if settings.test_command != DEFAULT_TEST_COMMAND or not kept:
        return settings
    return settings.model_copy(update={"test_command": f"{DEFAULT_TEST_COMMAND} {shlex.join(kept)}"})


def _timed_task_stage(image: RepoImageBuild, clock: StageClock) -> None:
    with clock.stage(TASK_IMAGE_BESIDE):
        image.task_stage()


def _timed_image_scan(
    backend: DockerBackend,
    image: str,
    packages: list[str],
    clock: StageClock,
    cache_dir: Path,
    stop: threading.Event,
    built: Future,
) -> tuple[ImageIndex, list[Hit]]:
    built.result()  # the task stage's own error, if it failed (the baseline has raised it already)
    with clock.stage(IMAGE_SCAN_BESIDE):
        index, hits = cached_index(backend, image, packages, cache_dir, stop)
        index.sorted_tokens  # noqa: B018 -- sorted here, once, rather than by the first jobs at once
        return index, hits


def no_tests_error(source: str, root: Path) -> str:
    """Why a checkout without test files makes no task; an sdist (it has PKG-INFO) that left its tests out names the
    repository its metadata points to."""
    found = "no test_*.py, *_test.py or tests/ directory"
    if not (root / "PKG-INFO").is_file():
        return f"{source} has no tests ({found}): pick a repository with a pytest suite"
    metadata = email.parser.Parser().parsestr((root / "PKG-INFO").read_text(errors="replace"), headersonly=True)
    urls = [value.split(",", 1)[-1].strip() for value in metadata.get_all("Project-URL") or []]
    urls += [metadata["Home-page"]] if metadata.get("Home-page") else []
    where = next((url for url in urls if "git" in url), urls[0] if urls else None)
    return (
        f"{source} is an sdist that leaves its tests out ({found}): synthesize from the project's repository "
        + (f"({where}) " if where else "")
        + "at the tag of this release instead"
    )


def prepare_repo(
    source: str,
    settings: SynthSettings,
    backend: DockerBackend,
    scratch: Path,
    created_images: list[str],
    on_stage=None,
) -> RepoContext:
    """Check out, build the wheelhouse and repo image, and run the baseline; SynthError on bad input.

    The repo image goes into `created_images` only when this call built it, so that the caller can remove it on failure.
    """
    clock = StageClock()
    stage = clock.sequence(on_stage)
    stage("checkout")
    checked = checkout(source, settings.ref, scratch)
    layout = read_layout(checked.root)
    if not layout.test_files:
        raise SynthError(no_tests_error(source, checked.root))
    if not layout.modules:
        raise SynthError(
            f"{source} has no importable package (no directory with __init__.py): pick a Python package repository"
        )
    settings = with_project_options(settings, checked.root)
    stage("wheelhouse")
    build_copy = scratch / "wheel-build"
    shutil.copytree(checked.root, build_copy, symlinks=True)
    write_pkg_info(build_copy, project_name(build_copy), checked.scm_version, build_system(build_copy).requires)
    python_version = image_python_version(backend, BASE_IMAGE, settings.cache_dir)
    wheelhouse = build_wheelhouse(
        build_copy, settings.cache_dir, tuple(settings.find_links), settings.offline, python_version
    )
    tag = repo_image_tag(checked.repo_name, wheelhouse.name)
    stage("repo image")
    with RepoImageBuild(backend, tag, wheelhouse) as image:
        if image.needed:
            created_images += [tag, build_stage_tag(tag)]
        image.build_stage()
        context = RepoContext(
            backend, checked, layout, tag, settings, wheelhouse, clock, baseline=Baseline(set(), set(), {}, [], {})
        )
        # Beside the editable install (which runs in the build stage): the task stage, then the image's scan; the
        # baseline waits for the task stage alone.
        stop = threading.Event()  # set when the run stops or fails here: leaving the `with` waits for the scan
        with ThreadPoolExecutor(1, thread_name_prefix="image-scan") as beside:
            task_image = beside.submit(_timed_task_stage, image, clock)
            scan = beside.submit(
                _timed_image_scan, backend, tag, layout.top_packages, clock, settings.cache_dir, stop, task_image
            )
            try:
                stage("editable install")
                context.capture_editable_install()
                stage("task image")
                task_image.result()
                stage("baseline")
                with context.sandbox() as sb:
                    context.baseline = run_baseline(
                        sb,
                        context.layout,  # with the files the install generated
                        settings.test_command,
                        settings.baseline_runs,
                        settings.test_timeout_s,
                        settings.max_baseline_failure_fraction,
                    )
            except BaseException:
                stop.set()
                raise
            stage("image scan")
            context.image_index, hits = scan.result()
    if hits:
        shown = ", ".join(f"/{hit.path} ({hit.canary})" for hit in hits[:3])
        raise SynthError(
            f"the repository image {tag} already holds the code every task would delete: {shown}. Remedy: make sure no "
            "dependency in the wheelhouse pulls in the project itself, and rebuild with `regrow synth` after removing "
            "the image"
        )
    stage(None)
    return context
