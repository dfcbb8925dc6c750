"""Prints, as one JSON list, the modules of the pytest11 entry points installed in the sandbox's interpreter; run there
with `python -I -c`."""

import importlib.metadata as m
import json

if __name__ == "__main__":
    print(json.dumps(sorted({e.module for e in m.entry_points(group="pytest11")})))
