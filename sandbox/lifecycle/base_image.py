"""The base image, built with no registry: debootstrap from the machine's own apt mirror, then `docker import`."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from sandbox.errors import SandboxError
from sandbox.layout import AGENT_UID, AGENT_USER, WORKSPACE
from sandbox.lifecycle.docker_backend import DockerBackend

log = logging.getLogger(__name__)

# tzdata and locales: what test suites commonly assume a developer's machine has (minbase of trixie drops tzdata).
BASE_PACKAGES = ("python3", "python3-venv", "git", "coreutils", "ca-certificates", "tzdata", "locales")
LOCALES = ("C.UTF-8", "en_US.UTF-8")
# Bump when the recipe below changes: the tag changes, so every machine builds the new image (and repo images on it).
BASE_REVISION = 2


def regrow_version() -> str:
    try:
        return version("regrow")
    except PackageNotFoundError:
        return "0.0.0"


BASE_IMAGE = f"regrow/base:{regrow_version()}-r{BASE_REVISION}"


class ImageSettings(BaseSettings):
    """Where the base image's packages come from (prefix REGROW_IMAGES_)."""

    model_config = SettingsConfigDict(env_prefix="REGROW_IMAGES_")

    apt_mirror: str | None = None
    suite: str | None = None
    apt_dir: Path = Path("/etc/apt")


@dataclass(frozen=True)
class AptSource:
    uri: str
    suite: str


def os_codename(os_release: Path = Path("/etc/os-release")) -> str:
    text = os_release.read_text() if os_release.exists() else ""
    match = re.search(r"^VERSION_CODENAME=\"?([a-z]+)\"?$", text, re.MULTILINE)
    if not match:
        raise SandboxError(f"cannot tell this machine's Debian release from {os_release}; set REGROW_IMAGES_SUITE")
    return match.group(1)


def _deb822_entries(text: str) -> list[dict[str, str]]:
    entries = []
    for paragraph in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in paragraph.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if fields:
            entries.append(fields)
    return entries


def _one_line_entries(text: str) -> list[dict[str, str]]:
    entries = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()  # drop [options] and comments
        if len(words) >= 3:
            entries.append({"types": words[0], "uris": words[1], "suites": words[2], "components": " ".join(words[3:])})
    return entries


def apt_sources(apt_dir: Path) -> list[dict[str, str]]:
    """Every entry of the machine's apt sources, in deb822 field names, in apt's reading order."""
    entries: list[dict[str, str]] = []
    if (apt_dir / "sources.list").exists():
        entries += _one_line_entries((apt_dir / "sources.list").read_text())
    parts = apt_dir / "sources.list.d"
    for path in sorted(parts.glob("*")) if parts.is_dir() else []:
        if path.suffix == ".list":
            entries += _one_line_entries(path.read_text())
        elif path.suffix == ".sources":
            entries += [e for e in _deb822_entries(path.read_text()) if e.get("enabled", "yes") != "no"]
    return entries


def find_apt_mirror(settings: ImageSettings | None = None) -> AptSource:
    """The Debian mirror and suite this machine itself installs from."""
    settings = settings or ImageSettings()
    suite = settings.suite or os_codename()
    if settings.apt_mirror:
        return AptSource(settings.apt_mirror, suite)
    for entry in apt_sources(settings.apt_dir):
        if "deb" in entry.get("types", "").split() and suite in entry.get("suites", "").split():
            if "main" in entry.get("components", "").split():
                return AptSource(entry["uris"].split()[0], suite)
    raise SandboxError(
        f"no apt source for '{suite} main' in {settings.apt_dir}/sources.list*: add one, or set "
        "REGROW_IMAGES_APT_MIRROR"
    )


def _root_command(argv: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return argv
    if shutil.which("sudo"):
        return ["sudo", "-n", *argv]
    raise SandboxError("building the base image needs root (debootstrap and chroot): run as root or with sudo")


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(_root_command(argv), capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise SandboxError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))


def build_base_image(backend: DockerBackend, tag: str = BASE_IMAGE, force: bool = False) -> bool:
    """Build the base image unless it exists; True when it was built now."""
    if backend.image_exists(tag) and not force:
        return False
    if not shutil.which("debootstrap"):
        raise SandboxError("debootstrap is not installed: `apt-get install debootstrap` (make does this for you)")
    source = find_apt_mirror()
    log.info("debootstrapping %s from %s", source.suite, source.uri)
    with tempfile.TemporaryDirectory(prefix="regrow-base-") as work:
        rootfs = Path(work) / "rootfs"
        try:
            _run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(BASE_PACKAGES)}",
                    source.suite,
                    str(rootfs),
                    source.uri,
                ],
                "debootstrap",
            )
            for name in LOCALES:
                language, _, charmap = name.partition(".")
                _run(["chroot", str(rootfs), "localedef", "-i", language, "-f", charmap, name], f"localedef {name}")
            _run(
                [
                    "chroot",
                    str(rootfs),
                    "useradd",
                    "--create-home",
                    "--uid",
                    str(AGENT_UID),
                    "--shell",
                    "/bin/bash",
                    AGENT_USER,
                ],
                "useradd",
            )
            _run(
                ["chroot", str(rootfs), "install", "-d", "-o", AGENT_USER, "-g", AGENT_USER, WORKSPACE],
                f"mkdir {WORKSPACE}",
            )
            _run(["sh", "-c", f"rm -rf {rootfs}/var/cache/apt/archives/*.deb {rootfs}/var/lib/apt/lists/*"], "clean-up")
            archive = Path(work) / "rootfs.tar"
            _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."], "tar")
            repository, _, version_tag = tag.partition(":")
            backend.api.import_image_from_file(
                str(archive),
                repository=repository,
                tag=version_tag or "latest",
                changes=[
                    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "ENV LANG=C.UTF-8",
                    'CMD ["/bin/bash"]',
                ],
            )
        finally:
            # debootstrap leaves root-owned files (and maybe mounts) behind.
            subprocess.run(_root_command(["rm", "-rf", "--one-file-system", str(rootfs)]), capture_output=True)
    log.info("built %s", tag)
    return True
