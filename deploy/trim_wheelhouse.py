"""Removes from the service wheelhouse what only openenv's web interface pulls in: gradio and the packages nothing else
of regrow's needs (pandas, pillow, ...). regrow never loads that interface, and those wheels were a third of the
service image's install (about 200 MB of 574). The image then installs the wheelhouse with --no-deps.

The closure is read from the metadata of the venv this runs in (regrow installed), so a package that another
requirement also needs (python-multipart: mcp) stays. Usage: python deploy/trim_wheelhouse.py WHEELHOUSE
"""

import sys
from importlib.metadata import distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# (requirer, requirement) edges the service image does without
UNUSED = {("openenv", "gradio")}


def closure(root: str, cut: set[tuple[str, str]]) -> set[str]:
    """Every distribution `root` needs (with the extras each requirement asks of it) under this interpreter's markers,
    skipping the `cut` edges."""
    installed = {canonicalize_name(d.metadata["Name"]): d for d in distributions()}
    seen: set[tuple[str, str]] = set()
    pending = [(canonicalize_name(root), "")]
    while pending:
        name, extra = pending.pop()
        if (name, extra) in seen or name not in installed:
            continue
        seen.add((name, extra))
        for text in installed[name].requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
                continue
            child = canonicalize_name(requirement.name)
            if (name, child) not in cut:
                pending += [(child, wanted) for wanted in ("", *requirement.extras)]
    return {name for name, _ in seen}


def main(wheelhouse: Path) -> None:
    unused = closure("regrow", set()) - closure("regrow", UNUSED)
    if "gradio" not in unused:
        sys.exit("trim_wheelhouse: gradio is not in regrow's closure here; is regrow installed in this venv?")
    removed = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        if canonicalize_name(wheel.name.split("-")[0]) in unused:
            wheel.unlink()
            removed.append(wheel.name.split("-")[0])
    print(f"trim_wheelhouse: removed {len(removed)} wheels only openenv's web interface needs: {', '.join(removed)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
