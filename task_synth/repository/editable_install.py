"""The repository's editable install in a sandbox: the checkout copied in and installed once with no network, the
files the install added captured, and both written into each later sandbox as a reset does; pip's errors named."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

from sandbox import Sandbox
from sandbox.layout import AGENT_HOME, AGENT_UID, AGENT_USER, WORKSPACE
from task_synth.repository.scm_version import version_env

# Not under /tmp: the engine archive API cannot see into the tmpfs mounted there.
SCRATCH = f"{AGENT_HOME}/.regrow-synth"
INSTALL_MARK = f"{SCRATCH}/install.mark"
INSTALL_ARCHIVE = f"{SCRATCH}/install.tar.gz"
# Files and folders the install created or changed (newer than the mark), caches left out, owned by agent.
_CAPTURE = (
    f"find opt/venv -newer {INSTALL_MARK} -not -name '*.pyc' -not -path '*/__pycache__*' -print0 | "
    f"tar --null --no-recursion -T - --owner={AGENT_UID} --group={AGENT_UID} --numeric-owner -czf {INSTALL_ARCHIVE}"
)
# A line that names an exception, as the last line of a traceback does: "ModuleNotFoundError: No module named 'x'".
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)(: |$)")
# Colour codes, as the engine wraps each stderr line of a `docker build` step in red.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def tree_archive(root: Path, prefix: str = "", mtime: int | None = None) -> bytes:
    """A tar of `root`'s files owned by the agent user, for import_tree; with a `prefix` ("name/"), `root` itself is
    an entry of that name too. `mtime` gives every entry one time."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in ([root] if prefix else []) + sorted(root.rglob("*")):
            name = prefix.rstrip("/") if path == root else f"{prefix}{path.relative_to(root).as_posix()}"
            info = archive.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = AGENT_UID
            info.uname = info.gname = AGENT_USER
            if mtime is not None:
                info.mtime = mtime
            if info.isfile():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


# --use-pep517: a project without pyproject.toml (six, pytz) otherwise goes through `setup.py develop`, which new
# setuptools runs as a pip subprocess with build isolation, and that needs an index.
EDITABLE_INSTALL = (
    f"pip install -q --no-deps --no-build-isolation --use-pep517 --disable-pip-version-check -e {WORKSPACE}"
)


def install_workspace(sb: Sandbox, checkout: Path, timeout: float, scm_version: str | None = None) -> None:
    """Copy the checkout into /workspace and install it editable, with no network, as `scm_version` where its build
    backend would read git (scm_version.py); `capture_install` then reads what the install added to the venv."""
    sb.import_tree(WORKSPACE, tree_archive(checkout))
    sb.exec(f"mkdir -p {SCRATCH} && touch {INSTALL_MARK}", timeout=30).raise_for_timeout()
    env = version_env(checkout, scm_version)
    result = sb.exec(EDITABLE_INSTALL, timeout=timeout, cwd=WORKSPACE, env=env or None)
    if result.exit_code != 0:
        from task_synth.errors import SynthError

        detail = " | ".join(pip_error_lines(result.stdout + "\n" + result.stderr))
        # Which way it ended tells a build error from a killed or timed-out install.
        ending = "timed out" if result.timed_out else f"exit {result.exit_code}"
        detail = f"{detail}; {ending} after {result.duration_s:.0f} s"
        raise SynthError(
            f"the repository does not install editable in its image ({detail}): check its build configuration"
        )


def seed_workspace(sb: Sandbox, install_archive: bytes, archive: bytes) -> None:
    """Make a container of the task image into the task's, as a reset does: the editable install's files, then the
    workspace (an archive rooted at /)."""
    sb.import_tree("/", install_archive)
    sb.import_tree("/", archive)
    sb.exec(f"mkdir -p {SCRATCH}", timeout=30).raise_for_timeout()


def capture_install(sb: Sandbox) -> bytes:
    """What the editable install added to /opt/venv, as a gzipped tar at /: the same for every task of a checkout,
    since it points into /workspace, so a reset writes it beside the task's workspace instead of running pip."""
    listed = sb.exec(_CAPTURE, timeout=120, cwd="/")
    if listed.exit_code != 0:
        raise RuntimeError(f"could not archive the editable install: {listed.stderr.strip()[-300:]}")
    return sb.read_file(INSTALL_ARCHIVE)


def pip_error_lines(output: str) -> list[str]:
    """The lines of a failed pip run's output that name its error; the last line when none does.

    Those are pip's own `ERROR:` and `error:` lines, its `×` summaries, and the last exception of the backend's
    traceback.
    """
    named: list[tuple[int, str]] = []
    exception: tuple[int, str] | None = None
    lines = [line.strip() for line in ANSI_ESCAPE.sub("", output).splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if EXCEPTION_LINE.match(line):
            exception = (index, line)
        elif line.startswith(("ERROR:", "error:", "× ")) and line != "error: subprocess-exited-with-error":
            named.append((index, line))
    found = sorted(named + ([exception] if exception else []))
    return [line for _, line in found] or lines[-1:] or ["no output"]
