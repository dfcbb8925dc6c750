"""Compose v2 for the tests: `docker compose` if the machine has it, else Debian's docker-compose 2.x package.

Debian bookworm ships only Compose v1 (`docker-compose` 1.29); trixie packages v2 as a static binary.
The tests fetch that package from the mirror in this machine's own apt sources, unpack the binary into
.cache/compose-v2 and run it standalone, which behaves as `docker compose` does.
"""

import io
import lzma
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import httpx

from sandbox.lifecycle.base_image import find_apt_mirror

CACHE = Path(__file__).parent.parent / ".cache" / "compose-v2"
SUITE = "trixie"  # the first Debian release whose docker-compose package is Compose v2
PLUGIN_PATH = "usr/libexec/docker/cli-plugins/docker-compose"


def compose_v2_command() -> list[str]:
    """argv prefix of a Compose v2: the machine's `docker compose`, or the binary from Debian's package."""
    if _is_v2(["docker", "compose"]):
        return ["docker", "compose"]
    binary = CACHE / "docker-compose"
    if not binary.exists():
        _fetch(binary)
    if not _is_v2([str(binary)]):
        raise RuntimeError(f"{binary} is not a working Compose v2; delete it and rerun")
    return [str(binary)]


def _is_v2(argv: list[str]) -> bool:
    try:
        result = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and re.match(r"v?2\.", result.stdout.strip()) is not None


def _fetch(binary: Path) -> None:
    mirror = find_apt_mirror().uri.rstrip("/")  # the machine's own Debian mirror carries every release
    with httpx.Client(timeout=120, follow_redirects=True) as http:
        index = lzma.decompress(_get(http, f"{mirror}/dists/{SUITE}/main/binary-amd64/Packages.xz")).decode()
        stanza = next((s for s in index.split("\n\n") if s.startswith("Package: docker-compose\n")), None)
        if stanza is None:
            raise RuntimeError(f"no docker-compose package in {mirror} {SUITE}")
        filename = re.search(r"^Filename: (\S+)$", stanza, re.MULTILINE).group(1)
        deb = _get(http, f"{mirror}/{filename}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    with open(partial, "wb") as out:
        shutil.copyfileobj(_member_of_deb(deb, PLUGIN_PATH), out)
    partial.chmod(0o755)
    partial.rename(binary)


def _get(http: httpx.Client, url: str) -> bytes:
    response = http.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"GET {url} answered {response.status_code}")
    return response.content


def _member_of_deb(deb: bytes, path: str) -> io.BufferedIOBase:
    """One file out of a .deb: an `ar` archive whose data.tar.* member holds the files."""
    if not deb.startswith(b"!<arch>\n"):
        raise RuntimeError("the downloaded docker-compose package is not a Debian archive")
    offset = 8
    while offset < len(deb):
        header = deb[offset : offset + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        body = deb[offset + 60 : offset + 60 + size]
        if name.startswith("data.tar"):
            archive = tarfile.open(fileobj=io.BytesIO(body))
            member = archive.extractfile(f"./{path}")
            if member is None:
                raise RuntimeError(f"{path} is missing from the docker-compose package")
            return member
        offset += 60 + size + (size % 2)
    raise RuntimeError("the docker-compose package has no data.tar member")
