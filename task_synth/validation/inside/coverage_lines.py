"""Reads coverage.py's data in the sandbox and writes line -> context indices per file as compact JSON:
`python regrow_coverage_lines.py DATA_BASENAME OUT_JSON`.

`coverage json --show-contexts` repeats each node id per line and grew to 785 MB on a suite of 2,000 parametrized tests.
"""

from __future__ import annotations

import json
import sys

import coverage


def main(argv: list[str]) -> None:
    data = coverage.CoverageData(basename=argv[1])
    data.read()
    contexts = sorted(data.measured_contexts())
    index = {name: number for number, name in enumerate(contexts)}
    files: dict[str, dict[int, list[int]]] = {}
    for path in data.measured_files():
        by_line = data.contexts_by_lineno(path)
        files[path] = {line: sorted(index[c] for c in names if c in index) for line, names in by_line.items()}
    json.dump({"contexts": contexts, "files": files}, open(argv[2], "w"), separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv)
