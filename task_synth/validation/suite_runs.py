"""Running a repository's tests in a sandbox: pytest with our outcome report, and per-test coverage."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from proto.tasks import HASH_SEED
from sandbox import Sandbox
from sandbox.layout import WORKSPACE
from task_synth.repository.editable_install import SCRATCH
from task_synth.validation.fork_server import through_fork_server

log = logging.getLogger(__name__)
PLUGIN_DIR = f"{SCRATCH}/plugins"
COVERAGE_RC = f"{SCRATCH}/coverage.rc"
COVERAGE_JSON = f"{SCRATCH}/coverage.json"
# --tb=line: outcomes are all a run needs, and rendering long tracebacks took most of a run in which a deletion
# fails 2,000 tests (packaging: minutes per run). Collection errors still show their `E` lines.
RUN_OPTIONS = "-p no:cacheprovider --tb=line"
# Every test run hashes strings the same way, so that ids and orders built from sets match from run to run.
TEST_ENV = {"PYTHONHASHSEED": str(HASH_SEED)}
# The Python that runs in the sandbox, as modules of inside/: written there under the names the commands below use.
INSIDE = Path(__file__).with_name("inside")
# Measures coverage inside pytest and switches its dynamic context to each test's node id, for any pytest command.
CONTEXT_PLUGIN_SOURCE = INSIDE / "coverage_context_plugin.py"


# The environment a test run starts with, and so the one the sandbox's pytest fork server starts with.
SERVER_ENV = {**TEST_ENV, "PYTHONPATH": PLUGIN_DIR}
REPORT_PATH = f"{SCRATCH}/report.json"
SELECTION_PATH = f"{SCRATCH}/selected.json"
REPORT_PLUGIN_NAME = "regrow_report"
# Records each test's outcome under pytest's own node id (report.nodeid, what the grader and the records use), so that
# no report format has to be mapped back to ids. With REGROW_SELECTED it keeps only the listed tests, in the order the
# suite runs them, as the grader does: a suite whose tests depend on their order (arrow registers locales in one test
# and validates all of them in another) passes here as it does in a whole run. With REGROW_REPEAT > 1 it runs the
# kept tests that many rounds in one process, tells each test its round (REGROW_ROUND) and keeps each round's
# outcomes: reruns and trivial stand-ins cost one pytest start in all.
REPORT_PLUGIN_SOURCE = INSIDE / "outcome_report_plugin.py"


@dataclass
class SuiteRun:
    """Outcomes of one pytest run keyed by node id (True = passed in every round), the outcomes of each round of a
    repeated run, and how many test cases it executed."""

    outcomes: dict[str, bool] = field(default_factory=dict)
    executions: int = 0
    timed_out: bool = False
    exit_code: int = 0
    output_tail: str = ""
    rounds: list[dict[str, bool]] = field(default_factory=list)
    oom_killed: bool = False

    def failed(self, node_ids: list[str]) -> set[str]:
        """The given tests that did not pass (absent from the report counts as failed)."""
        return {node_id for node_id in node_ids if not self.outcomes.get(node_id, False)}


def read_report(data: bytes) -> list[dict[str, bool]]:
    """Each round's outcomes, node id -> passed, from what the report plugin wrote; ValueError when it is not that."""
    rounds = json.loads(data)
    if not isinstance(rounds, list) or not all(isinstance(outcomes, dict) for outcomes in rounds):
        raise ValueError("a test report is a JSON list of {node id: passed} objects")
    return [{str(node): bool(passed) for node, passed in outcomes.items()} for outcomes in rounds]


def files_of_tests(node_ids: list[str]) -> list[str]:
    """The files the given tests live in, in path order: what pytest collects for them, whole."""
    return sorted({node_id.split("::")[0] for node_id in node_ids})


def run_tests(
    sb: Sandbox,
    test_command: str,
    node_ids: list[str] | None,
    timeout: float,
    env: dict[str, str] | None = None,
    repeat: int = 1,
) -> SuiteRun:
    """Run the suite (node_ids None) or the given tests, with TEST_ENV; a timeout yields a run with `timed_out` set.

    The given tests run in the suite's own order whatever their order here, and an id that no longer collects is
    reported missing (so failed) instead of stopping the run. `repeat` > 1 runs the tests that many rounds in one
    process; `rounds` then holds each round's outcomes.
    """
    if node_ids is not None and not node_ids:
        return SuiteRun()
    sb.write_file(f"{PLUGIN_DIR}/{REPORT_PLUGIN_NAME}.py", REPORT_PLUGIN_SOURCE.read_text())
    env = {**TEST_ENV, **(env or {})}
    env.update(
        REGROW_REPEAT=str(repeat),
        REGROW_REPORT_OUT=REPORT_PATH,
        PYTHONPATH=":".join(dict.fromkeys(filter(None, [PLUGIN_DIR, *env.get("PYTHONPATH", "").split(":")]))),
    )
    if node_ids is not None:
        sb.write_file(SELECTION_PATH, json.dumps(sorted(set(node_ids))))
        env["REGROW_SELECTED"] = SELECTION_PATH
    # The last run's report goes in the same shell as the run: one exec less per run.
    pytest = through_fork_server(sb, test_command)
    script = f'rm -f {REPORT_PATH}; {pytest} -q {RUN_OPTIONS} -p {REPORT_PLUGIN_NAME} "$@"'
    arguments = files_of_tests(node_ids) if node_ids is not None else []
    result = sb.exec(["sh", "-c", script, "sh", *arguments], timeout=timeout, cwd=WORKSPACE, env=env)
    run = SuiteRun(
        timed_out=result.timed_out,
        exit_code=result.exit_code,
        output_tail=(result.stdout + result.stderr)[-2000:],
        oom_killed=getattr(result, "oom_killed", False),
    )
    if result.timed_out:
        return run
    try:
        run.rounds = read_report(sb.read_file(REPORT_PATH))
    except Exception as error:  # no report: pytest died before its session finished (usage error, crash)
        log.debug("no test report (%s): %s", error, run.output_tail)
        return run
    for outcomes in run.rounds:
        for identifier, passed in outcomes.items():
            run.outcomes[identifier] = run.outcomes.get(identifier, True) and passed
    run.executions = sum(len(outcomes) for outcomes in run.rounds)
    return run


# Reads coverage's data in the sandbox and prints line -> context indices per file: `coverage json --show-contexts`
# repeats each node id per line and grew to 785 MB on a suite of 2,000 parametrized tests.
COVERAGE_LINES_SOURCE = INSIDE / "coverage_lines.py"
COVERAGE_LINES_PY = f"{SCRATCH}/regrow_coverage_lines.py"
# The context of lines run outside any test: no node id looks like it.
IMPORT_TIME = "<import>"
COVERAGE_DATA = f"{SCRATCH}/coverage.data"


def coverage_lines(report: dict) -> dict[str, dict[int, set[str]]]:
    """path -> line -> node ids, from what the coverage lines script wrote (paths relative to /workspace); a line run
    outside any test (while modules are imported and collected) names IMPORT_TIME."""
    contexts = [name or IMPORT_TIME for name in report["contexts"]]
    lines: dict[str, dict[int, set[str]]] = {}
    for path, by_line in report["files"].items():
        relative = path.removeprefix(f"{WORKSPACE}/")
        lines[relative] = {int(line): {contexts[index] for index in indices} for line, indices in by_line.items()}
    return lines


# coverage.py's own warnings, which a suite with `filterwarnings = error` turns into a failed run: a package its
# tests never import is no error of the suite.
QUIET_COVERAGE = "module-not-imported, module-not-measured, no-data-collected, module-not-python, include-ignored"


def coverage_rc(packages: list[str]) -> str:
    """coverage.py's settings for the map; its lists take commas or lines, a space would join two packages into one
    name."""
    return (
        f"[run]\nsource_pkgs = {', '.join(packages)}\nrelative_files = True\ndata_file = {COVERAGE_DATA}\n"
        f"disable_warnings = {QUIET_COVERAGE}\n"
    )


def coverage_map(
    sb: Sandbox, test_command: str, packages: list[str], timeout: float
) -> tuple[SuiteRun, dict[str, dict[int, set[str]]]]:
    """One suite run under coverage.py with per-test contexts: path -> line -> node ids that executed it."""
    sb.write_file(f"{PLUGIN_DIR}/regrow_test_context.py", CONTEXT_PLUGIN_SOURCE.read_text())
    sb.write_file(COVERAGE_LINES_PY, COVERAGE_LINES_SOURCE.read_text())
    sb.write_file(COVERAGE_RC, coverage_rc(packages))
    env = {"PYTHONPATH": PLUGIN_DIR, "REGROW_COVERAGE_RC": COVERAGE_RC}
    run = run_tests(sb, f"{test_command} -p regrow_test_context", None, timeout, env=env)
    report = sb.exec(["python", COVERAGE_LINES_PY, COVERAGE_DATA, COVERAGE_JSON], timeout=timeout, cwd=WORKSPACE)
    if report.exit_code != 0:
        log.warning("reading coverage data failed: %s", report.stderr[-500:])
        return run, {}
    return run, coverage_lines(json.loads(sb.read_file(COVERAGE_JSON)))
