"""Removing a function takes along what reads it at import through its module, in any module of the package
(semver's `_deprecated.py`: `cmd_bump = deprecated(cli.cmd_bump)`, 11 of 12 candidates import_broken), so that the
package still imports."""

import subprocess
import sys
from pathlib import Path

from task_synth.candidates.deletion import delete_unit
from task_synth.candidates.units import enumerate_units
from task_synth.repository.repo_layout import read_layout

FILES = {
    "ver/__init__.py": (
        'from ._deprecated import bump, check\nfrom . import cli\n\n__all__ = ["bump", "check", "cli"]\n'
    ),
    "ver/cli.py": (
        "def cmd_bump(version):\n    major, minor = version.split('.')\n    minor = int(minor) + 1\n"
        "    return f'{major}.{minor}'\n\n\n"
        "def cmd_check(version):\n    parts = version.split('.')\n    numbers = [p for p in parts if p.isdigit()]\n"
        "    return len(numbers) == 2\n\n\n"
        "def main(argv=None):\n    argv = argv or []\n    code = 0 if argv else 1\n    return code\n"
    ),
    "ver/_deprecated.py": (
        "import ver.cli\nfrom . import cli\n\n\ndef deprecated(func):\n    return func\n\n\n"
        "bump = deprecated(cli.cmd_bump)\ncheck = deprecated(ver.cli.cmd_check)\n\n\n"
        "@deprecated\ndef main(argv=None):\n    return cli.main(argv)\n"
    ),
    "ver/__main__.py": (
        "import sys\n\nfrom ver import cli\n\nMAIN = cli.main\n\n\n"
        "def run():\n    return cli.main(sys.argv[1:])\n\n\nif __name__ == '__main__':\n    sys.exit(run())\n"
    ),
    "tests/test_cli.py": (
        "from ver import bump, check\nfrom ver.cli import main\n\n\n"
        "def test_bump():\n    assert bump('1.2') == '1.3'\n\n\ndef test_check():\n    assert check('1.2')\n\n\n"
        "def test_main():\n    assert main(['x']) == 0\n"
    ),
}


def _removed(tmp_path: Path, qualname: str) -> Path:
    for path, text in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    layout = read_layout(tmp_path)
    unit = next(u for u in enumerate_units(layout) if (u.path, u.qualname) == ("ver/cli.py", qualname))
    for path, text in delete_unit(layout, unit, "remove").changed.items():
        (tmp_path / path).write_text(text)
    return tmp_path


def _imports(root: Path) -> subprocess.CompletedProcess:
    probe = "import ver, ver.__main__, ver._deprecated"
    return subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=60)


def test_a_read_through_the_module_goes_with_the_removed_function(tmp_path):
    root = _removed(tmp_path, "cmd_bump")
    assert _imports(root).stderr == ""
    deprecated = (root / "ver/_deprecated.py").read_text()
    assert "bump = " not in deprecated and "check = deprecated(ver.cli.cmd_check)" in deprecated
    assert "bump" not in (root / "ver/__init__.py").read_text().replace("_deprecated", "")


def test_a_read_through_the_dotted_module_path_goes_too(tmp_path):
    root = _removed(tmp_path, "cmd_check")
    assert _imports(root).stderr == ""
    assert "check = " not in (root / "ver/_deprecated.py").read_text()


def test_module_level_reads_in_main_and_a_decorated_def_go_with_main(tmp_path):
    root = _removed(tmp_path, "main")
    assert _imports(root).stderr == ""
    assert "MAIN = " not in (root / "ver/__main__.py").read_text()
    assert "def run():" in (root / "ver/__main__.py").read_text()  # it reads cli.main only when called
