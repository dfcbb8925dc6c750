"""Imports each package named on the command line, so that one that fails exits non-zero with its error on stderr;
run in the sandbox with `python -c`."""

import importlib
import sys

if __name__ == "__main__":
    for name in sys.argv[1:]:
        importlib.import_module(name)
