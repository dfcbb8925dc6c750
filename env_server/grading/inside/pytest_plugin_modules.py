"""Prints the modules of the pytest plugins the image installs (its pytest11 entry points), one a line, so that they
can be named with -p (autoload is off); run in a grading container with `python -I -c`."""

import importlib.metadata as m

if __name__ == "__main__":
    print("\n".join(sorted({e.module for e in m.entry_points(group="pytest11")})))
