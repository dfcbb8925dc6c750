"""Run `python -m regrow.bench.gpu_check ARGS` as a GPU box would: with the standard library, this tree, the packages a
box with torch, transformers, accelerate and peft has (their installed requirements, transitively), the wheels
deploy/gpu-check/wheels.txt carries at the versions it pins (installed from the index into a folder of their own, as
`make wheelhouse-gpu` fetches them), and nothing else. The interpreter starts without site-packages (-S) and finds the
box's distributions through a folder of links to them, so that a missing one is missing as on the box; the carried
folder comes first, so that a newer release installed here cannot stand in for the pinned one (nor a new requirement
of it go unnoticed)."""

import importlib.metadata as metadata
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

BOX = ("torch", "transformers", "accelerate", "peft")
ROOT = Path(__file__).parents[2]
WHEELS = ROOT / "deploy" / "gpu-check" / "wheels.txt"


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def box_distributions() -> set[str]:
    """BOX and everything their installed metadata requires (extras left out), by normalized name."""
    seen: set[str] = set()
    todo = list(BOX)
    while todo:
        name = _name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def carried() -> set[str]:
    return {_name(line.split("==")[0]) for line in WHEELS.read_text().splitlines() if line and line[0] != "#"}


def link_farm(allowed: set[str], folder: Path) -> None:
    """Links in `folder` to the top-level files and folders of each installed distribution in `allowed`."""
    for distribution in metadata.distributions():
        if _name(distribution.metadata["Name"]) not in allowed:
            continue
        for top in {file.parts[0] for file in distribution.files or [] if file.parts[0] != ".."}:
            source, link = Path(distribution.locate_file(top)), folder / top
            if source.exists() and not link.exists() and not top.endswith((".pth", ".data")):
                link.symlink_to(source)


def install_carried(folder: Path) -> None:
    """The wheels wheels.txt names, at its versions and with no dependency of theirs, installed into `folder`."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder), "-r", str(WHEELS)]
    installed = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, f"installing wheels.txt failed:\n{installed.stderr[-3000:]}"


def run_as_on_a_box(arguments: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m regrow.bench.gpu_check ARGUMENTS` with only the box's and the carried distributions importable."""
    with tempfile.TemporaryDirectory(prefix="regrow-box-") as temporary:
        # dill pickles by value what lies outside a folder named site-packages
        carried_folder, box_folder = Path(temporary) / "carried" / "site-packages", Path(temporary) / "site-packages"
        carried_folder.mkdir(parents=True)
        box_folder.mkdir()
        install_carried(carried_folder)
        link_farm(box_distributions() - carried(), box_folder)
        paths = [str(ROOT), str(carried_folder), str(box_folder)]
        start = f"import sys, runpy; sys.path[:0] = {paths!r}; sys.argv[0] = 'regrow.bench.gpu_check'; "
        start += "runpy.run_module('regrow.bench.gpu_check', run_name='__main__', alter_sys=True)"
        command = [sys.executable, "-S", "-c", start, *arguments]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
