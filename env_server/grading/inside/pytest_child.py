"""The test child of a graded run: pytest on the launcher's arguments, each wanted test's phase outcomes sent up the
launcher's pipe as JSON lines as they happen.

`python pytest_child.py CONFIG FD`. What this process sends is the test process's own account, so the grader takes
it as feedback and as a precondition, never as proof that the deleted unit works.
"""

import json
import os
import sys

import pytest


class Recorder:
    """Keeps only the wanted node ids and sends one line per phase report of each."""

    def __init__(self, wanted, out):
        self.wanted, self.out = wanted, out

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        kept = [item for item in items if item.nodeid in self.wanted]
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in self.wanted])
        items[:] = kept

    def pytest_runtest_logreport(self, report):
        if report.nodeid not in self.wanted:
            return
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped or hasattr(report, "wasxfail"):
            outcome = "skipped"
        else:
            outcome = "passed"
        self.send({"nodeid": report.nodeid, "outcome": outcome})

    def pytest_collectreport(self, report):
        if report.failed and report.nodeid:  # a test file that cannot even be imported: each of its tests errs
            self.send({"collect_error": report.nodeid})

    def send(self, record):
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()


def main(argv):
    with open(argv[1]) as handle:
        config = json.load(handle)
    out = os.fdopen(int(argv[2]), "w")
    recorder = Recorder(set(config["wanted"]), out)
    code = pytest.main(config["arguments"], plugins=[recorder])
    recorder.send({"exit_code": int(code)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
