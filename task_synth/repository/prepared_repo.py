"""One repository at one commit, prepared for tasks: its checkout and layout, the repo image built from its wheelhouse,
and the files its editable install adds. Every stage reads it; validation/repo_context.py extends it with the baseline,
the image index and the sandboxes that validation runs in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sandbox import DockerBackend, Limits
from sandbox.layout import WORKSPACE
from task_synth.repository.editable_install import capture_install, install_workspace
from task_synth.repository.generated_files import copy_generated
from task_synth.repository.repo_image import SYNTH_LABEL, build_stage_tag
from task_synth.repository.repo_layout import RepoLayout
from task_synth.repository.source import Checkout
from task_synth.settings import SynthSettings
from task_synth.stage_clock import StageClock

# Every synthesis sandbox (install, validation, oracle) runs under these limits.
SANDBOX_LIMITS = Limits(memory_bytes=2048 << 20, pids=512, file_size_bytes=512 << 20)


@dataclass
class PreparedRepo:
    """The checkout, its layout and repo image, the settings of the run and its stage clock."""

    backend: DockerBackend
    checkout: Checkout
    layout: RepoLayout
    repo_image: str
    settings: SynthSettings
    wheelhouse: Path | None = None
    clock: StageClock = field(default_factory=StageClock)
    # What `pip install -e` of the checkout adds to the venv (gzipped tar at /): every task's reset writes it.
    install_archive: bytes = b""

    def capture_editable_install(self) -> None:
        """Install the checkout editable in the build stage, once, and keep the files the install adds: to the venv in
        the install archive, to the source tree (a version file) in the checkout."""
        sb = self.backend.create(
            build_stage_tag(self.repo_image), limits=SANDBOX_LIMITS, labels={SYNTH_LABEL: "install"}, workdir=WORKSPACE
        )
        with sb:
            install_workspace(sb, self.checkout.root, self.settings.test_timeout_s, self.checkout.scm_version)
            self.install_archive = capture_install(sb)
            self.layout = copy_generated(sb, self.layout)
