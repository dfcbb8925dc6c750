"""The Python interpreters on this machine that regrow supports (3.11 and later): the one running the tests, the
system's own (/usr/bin/python3: Debian bookworm's 3.11.2), and any other 3.11+ found on PATH or under pyenv."""

import functools
import glob
import os
import shutil
import subprocess
import sys

FLOOR = (3, 11)
# Its version and the interpreter binary under any venv or shim, so that one interpreter is listed once.
PROBE = "import os, sys; print('%d.%d.%d' % sys.version_info[:3], os.path.realpath(sys._base_executable))"


def _candidates() -> list[str]:
    names = ["/usr/bin/python3", sys.executable, *(shutil.which(f"python3.{minor}") for minor in range(11, 16))]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    names += sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3")))
    return [name for name in names if name and os.access(name, os.X_OK)]


@functools.cache
def supported_pythons() -> tuple[tuple[str, str], ...]:
    """(path, version) of each distinct supported interpreter (one per interpreter binary), the system's own first."""
    found: dict[str, tuple[str, str]] = {}
    for path in _candidates():
        ran = subprocess.run(
            [path, "-I", "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=30,
        )
        version, _, binary = ran.stdout.strip().partition(" ")
        if ran.returncode == 0 and version and tuple(map(int, version.split(".")[:2])) >= FLOOR:
            found.setdefault(binary, (path, version))
    return tuple(found.values())
