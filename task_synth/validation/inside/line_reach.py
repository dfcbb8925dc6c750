"""Which lines of the deleted units' files each replayed call runs, so that a mutant on a line no call reaches counts
as surviving rather than as equivalent: no check can tell it apart, so nothing vouches for that line.

`LineReach(paths)` is a context manager; `lines` holds {path: set of line numbers} run inside it. It traces with
sys.settrace, and a local tracer only in those files' frames, so other code pays one call per frame. Shipped beside
the recorder plugin as `regrow_line_reach`. Stdlib only: it runs in the repository's interpreter.
"""

import sys


class LineReach:
    def __init__(self, paths):
        self.paths = frozenset(paths)
        self.lines = {}
        self._previous = None

    def __enter__(self):
        self._previous = sys.gettrace()
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._previous)
        return False

    def _on_call(self, frame, event, arg):
        path = frame.f_code.co_filename
        if path not in self.paths:
            return None
        seen = self.lines.setdefault(path, set())

        def local(frame, event, arg):
            if event == "line":
                seen.add(frame.f_lineno)
            return local

        return local

    def as_json(self):
        return {path: sorted(lines) for path, lines in self.lines.items()}
