"""Running a repository's tests in a sandbox: the workspace upload, pytest with our outcome report, and per-test
coverage."""

from __future__ import annotations

import io
import json
import logging
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from proto.tasks import HASH_SEED
from sandbox import Sandbox
from sandbox.layout import AGENT_HOME, AGENT_UID, AGENT_USER, WORKSPACE

log = logging.getLogger(__name__)
# Not under /tmp: the engine archive API cannot see into the tmpfs mounted there.
SCRATCH = f"{AGENT_HOME}/.regrow-synth"
PLUGIN_DIR = f"{SCRATCH}/plugins"
COVERAGE_RC = f"{SCRATCH}/coverage.rc"
COVERAGE_JSON = f"{SCRATCH}/coverage.json"
INSTALL_MARK = f"{SCRATCH}/install.mark"
INSTALL_ARCHIVE = f"{SCRATCH}/install.tar.gz"
# Files and folders the install created or changed (newer than the mark), caches left out, owned by agent.
_CAPTURE = (
    f"find opt/venv -newer {INSTALL_MARK} -not -name '*.pyc' -not -path '*/__pycache__*' -print0 | "
    f"tar --null --no-recursion -T - --owner={AGENT_UID} --group={AGENT_UID} --numeric-owner -czf {INSTALL_ARCHIVE}"
)
# --tb=line: outcomes are all a run needs, and rendering long tracebacks took most of a run in which a deletion
# fails 2,000 tests (packaging: minutes per run). Collection errors still show their `E` lines.
RUN_OPTIONS = "-p no:cacheprovider --tb=line"
# Every test run hashes strings the same way, so that ids and orders built from sets match from run to run.
TEST_ENV = {"PYTHONHASHSEED": str(HASH_SEED)}
# A line that names an exception, as the last line of a traceback does: "ModuleNotFoundError: No module named 'x'".
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)(: |$)")
# Colour codes, as the engine wraps each stderr line of a `docker build` step in red.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Measures coverage inside pytest and switches its dynamic context to each test's node id, for any pytest command.
CONTEXT_PLUGIN = """
import os

import coverage
import pytest

# Started on import, before the conftests load: what runs while the package is imported is measured too.
_coverage = coverage.Coverage(config_file=os.environ["REGROW_COVERAGE_RC"])
_coverage.start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _coverage.switch_context(item.nodeid)
    yield
    _coverage.switch_context("")


def pytest_unconfigure(config):
    _coverage.stop()
    _coverage.save()
"""


REPORT_PATH = f"{SCRATCH}/report.json"
SELECTION_PATH = f"{SCRATCH}/selected.json"
REPORT_PLUGIN_NAME = "regrow_report"
# Records each test's outcome under pytest's own node id (report.nodeid, what the grader and the records use), so that
# no report format has to be mapped back to ids. With REGROW_SELECTED it keeps only the listed tests, in the order the
# suite runs them, as the grader does: a suite whose tests depend on their order (arrow registers locales in one test
# and validates all of them in another) passes here as it does in a whole run. With REGROW_REPEAT > 1 it runs the
# kept tests that many rounds in one process, tells each test its round (REGROW_ROUND) and keeps each round's
# outcomes: reruns and trivial stand-ins cost one pytest start in all.
REPORT_PLUGIN = """
import json
import os
from collections import Counter

import pytest

_repeat = max(1, int(os.environ.get("REGROW_REPEAT", "1")))
_seen = Counter()
_rounds = [{} for _ in range(_repeat)]
_current = [0]
_selected = None
if os.environ.get("REGROW_SELECTED"):
    with open(os.environ["REGROW_SELECTED"]) as listed:
        _selected = set(json.load(listed))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if _selected is not None:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in _selected])
        items[:] = [item for item in items if item.nodeid in _selected]
    items[:] = items * _repeat


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = min(_seen[item.nodeid], _repeat - 1)
    _seen[item.nodeid] += 1
    os.environ["REGROW_ROUND"] = str(_current[0])


def pytest_runtest_logreport(report):
    outcomes = _rounds[_current[0]]
    outcomes[report.nodeid] = outcomes.get(report.nodeid, True) and report.outcome == "passed"


def pytest_sessionfinish(session):
    with open(os.environ["REGROW_REPORT_OUT"], "w") as out:
        json.dump(_rounds, out)
"""


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


def tree_archive(root: Path, prefix: str = "", mtime: int | None = None) -> bytes:
    """A tar of `root`'s files owned by the agent user, for import_tree; with a `prefix` ("name/"), `root` itself is
    an entry of that name too. `mtime` gives every entry one time."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in ([root] if prefix else []) + sorted(root.rglob("*")):
            name = prefix.rstrip("/") if path == root else f"{prefix}{path.relative_to(root).as_posix()}"
            info = archive.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = AGENT_UID
            info.uname = info.gname = AGENT_USER
            if mtime is not None:
                info.mtime = mtime
            if info.isfile():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


# --use-pep517: a project without pyproject.toml (six, pytz) otherwise goes through `setup.py develop`, which new
# setuptools runs as a pip subprocess with build isolation, and that needs an index.
EDITABLE_INSTALL = (
    "pip install -q --no-deps --no-build-isolation --use-pep517 --disable-pip-version-check -e /workspace"
)


def install_workspace(sb: Sandbox, checkout: Path, timeout: float) -> None:
    """Copy the checkout into /workspace and install it editable, with no network; `capture_install` then reads what
    the install added to the venv."""
    sb.import_tree(WORKSPACE, tree_archive(checkout))
    sb.exec(f"mkdir -p {SCRATCH} && touch {INSTALL_MARK}", timeout=30).raise_for_timeout()
    result = sb.exec(EDITABLE_INSTALL, timeout=timeout, cwd=WORKSPACE)
    if result.exit_code != 0:
        from task_synth.errors import SynthError

        detail = " | ".join(pip_error_lines(result.stdout + "\n" + result.stderr))
        # Which way it ended tells a build error from a killed or timed-out install.
        ending = "timed out" if result.timed_out else f"exit {result.exit_code}"
        detail = f"{detail}; {ending} after {result.duration_s:.0f} s"
        raise SynthError(
            f"the repository does not install editable in its image ({detail}): check its build configuration"
        )


def seed_workspace(sb: Sandbox, install_archive: bytes, archive: bytes) -> None:
    """Make a container of the task image into the task's, as a reset does: the editable install's files, then the
    workspace (an archive rooted at /)."""
    sb.import_tree("/", install_archive)
    sb.import_tree("/", archive)
    sb.exec(f"mkdir -p {SCRATCH}", timeout=30).raise_for_timeout()


def capture_install(sb: Sandbox) -> bytes:
    """What the editable install added to /opt/venv, as a gzipped tar at /: the same for every task of a checkout,
    since it points into /workspace, so a reset writes it beside the task's workspace instead of running pip."""
    listed = sb.exec(_CAPTURE, timeout=120, cwd="/")
    if listed.exit_code != 0:
        raise RuntimeError(f"could not archive the editable install: {listed.stderr.strip()[-300:]}")
    return sb.read_file(INSTALL_ARCHIVE)


def pip_error_lines(output: str) -> list[str]:
    """The lines of a failed pip run's output that name its error; the last line when none does.

    Those are pip's own `ERROR:` and `error:` lines, its `×` summaries, and the last exception of the backend's
    traceback.
    """
    named: list[tuple[int, str]] = []
    exception: tuple[int, str] | None = None
    lines = [line.strip() for line in ANSI_ESCAPE.sub("", output).splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if EXCEPTION_LINE.match(line):
            exception = (index, line)
        elif line.startswith(("ERROR:", "error:", "× ")) and line != "error: subprocess-exited-with-error":
            named.append((index, line))
    found = sorted(named + ([exception] if exception else []))
    return [line for _, line in found] or lines[-1:] or ["no output"]


def read_report(data: bytes) -> list[dict[str, bool]]:
    """Each round's outcomes, node id -> passed, from what REPORT_PLUGIN wrote; ValueError when it is not that."""
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
    sb.write_file(f"{PLUGIN_DIR}/{REPORT_PLUGIN_NAME}.py", REPORT_PLUGIN)
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
    script = f'rm -f {REPORT_PATH}; {test_command} -q {RUN_OPTIONS} -p {REPORT_PLUGIN_NAME} "$@"'
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
COVERAGE_LINES_SCRIPT = """
import json, sys
import coverage

data = coverage.CoverageData(basename=sys.argv[1])
data.read()
contexts = sorted(data.measured_contexts())
index = {name: number for number, name in enumerate(contexts)}
files = {}
for path in data.measured_files():
    by_line = data.contexts_by_lineno(path)
    files[path] = {line: sorted(index[c] for c in names if c in index) for line, names in by_line.items()}
json.dump({"contexts": contexts, "files": files}, open(sys.argv[2], "w"), separators=(",", ":"))
"""
COVERAGE_LINES_PY = f"{SCRATCH}/regrow_coverage_lines.py"
# The context of lines run outside any test: no node id looks like it.
IMPORT_TIME = "<import>"
COVERAGE_DATA = f"{SCRATCH}/coverage.data"


def coverage_lines(report: dict) -> dict[str, dict[int, set[str]]]:
    """path -> line -> node ids, from what COVERAGE_LINES_SCRIPT printed (paths relative to /workspace); a line run
    outside any test (while modules are imported and collected) names IMPORT_TIME."""
    contexts = [name or IMPORT_TIME for name in report["contexts"]]
    lines: dict[str, dict[int, set[str]]] = {}
    for path, by_line in report["files"].items():
        relative = path.removeprefix("/workspace/")
        lines[relative] = {int(line): {contexts[index] for index in indices} for line, indices in by_line.items()}
    return lines


def coverage_rc(packages: list[str]) -> str:
    """coverage.py's settings for the map; its lists take commas or lines, a space would join two packages into one
    name."""
    return f"[run]\nsource_pkgs = {', '.join(packages)}\nrelative_files = True\ndata_file = {COVERAGE_DATA}\n"


def coverage_map(
    sb: Sandbox, test_command: str, packages: list[str], timeout: float
) -> tuple[SuiteRun, dict[str, dict[int, set[str]]]]:
    """One suite run under coverage.py with per-test contexts: path -> line -> node ids that executed it."""
    sb.write_file(f"{PLUGIN_DIR}/regrow_test_context.py", CONTEXT_PLUGIN)
    sb.write_file(COVERAGE_LINES_PY, COVERAGE_LINES_SCRIPT)
    sb.write_file(COVERAGE_RC, coverage_rc(packages))
    env = {"PYTHONPATH": PLUGIN_DIR, "REGROW_COVERAGE_RC": COVERAGE_RC}
    run = run_tests(sb, f"{test_command} -p regrow_test_context", None, timeout, env=env)
    report = sb.exec(["python", COVERAGE_LINES_PY, COVERAGE_DATA, COVERAGE_JSON], timeout=timeout, cwd=WORKSPACE)
    if report.exit_code != 0:
        log.warning("reading coverage data failed: %s", report.stderr[-500:])
        return run, {}
    return run, coverage_lines(json.loads(sb.read_file(COVERAGE_JSON)))
