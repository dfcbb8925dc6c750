"""Running a repository's tests in a sandbox: the workspace upload, pytest with JUnit XML, and per-test coverage."""

from __future__ import annotations

import io
import json
import logging
import re
import tarfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from proto.tasks import HASH_SEED
from sandbox import Sandbox

log = logging.getLogger(__name__)
# Not under /tmp: the engine archive API cannot see into the tmpfs mounted there.
SCRATCH = "/home/agent/.regrow-synth"
JUNIT_PATH = f"{SCRATCH}/junit.xml"
PLUGIN_DIR = f"{SCRATCH}/plugins"
COVERAGE_RC = f"{SCRATCH}/coverage.rc"
COVERAGE_JSON = f"{SCRATCH}/coverage.json"
# Every test run hashes strings the same way, so that ids and orders built from sets match from run to run.
TEST_ENV = {"PYTHONHASHSEED": str(HASH_SEED)}
# A line that names an exception, as the last line of a traceback does: "ModuleNotFoundError: No module named 'x'".
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)(: |$)")
# Measures coverage inside pytest and switches its dynamic context to each test's node id, for any pytest command.
CONTEXT_PLUGIN = '''
import os

import coverage
import pytest

_coverage = coverage.Coverage(config_file=os.environ["REGROW_COVERAGE_RC"])


def pytest_configure(config):
    _coverage.start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _coverage.switch_context(item.nodeid)
    yield
    _coverage.switch_context("")


def pytest_unconfigure(config):
    _coverage.stop()
    _coverage.save()
'''


@dataclass
class TestRun:
    """Outcomes of one pytest run keyed by node id (True = passed), and how many test cases it executed."""

    outcomes: dict[str, bool] = field(default_factory=dict)
    executions: int = 0
    timed_out: bool = False
    exit_code: int = 0
    output_tail: str = ""

    def failed(self, node_ids: list[str]) -> set[str]:
        """The given tests that did not pass (absent from the report counts as failed)."""
        return {node_id for node_id in node_ids if not self.outcomes.get(node_id, False)}


def tree_archive(root: Path, prefix: str = "") -> bytes:
    """A tar of `root`'s files owned by agent (uid 1000), for put_archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(root.rglob("*")):
            info = archive.gettarinfo(str(path), arcname=f"{prefix}{path.relative_to(root).as_posix()}")
            info.uid = info.gid = 1000
            info.uname = info.gname = "agent"
            if info.isfile():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


def install_workspace(sb: Sandbox, checkout: Path, timeout: float) -> None:
    """Copy the checkout into /workspace and install it editable, with no network."""
    sb.api.put_archive(sb.id, "/workspace", tree_archive(checkout))
    result = sb.exec("pip install -q --no-deps --no-build-isolation --disable-pip-version-check -e /workspace", timeout=timeout, cwd="/workspace")
    if result.exit_code != 0:
        from task_synth.errors import SynthError

        detail = " | ".join(pip_error_lines(result.stdout + "\n" + result.stderr))
        raise SynthError(f"the repository does not install editable in its image ({detail}): check its build configuration")


def pip_error_lines(output: str) -> list[str]:
    """The lines of a failed pip run's output that name its error; the last line when none does.

    Those are pip's own `ERROR:` and `error:` lines, its `×` summaries, and the last exception of the backend's traceback.
    """
    named: list[tuple[int, str]] = []
    exception: tuple[int, str] | None = None
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if EXCEPTION_LINE.match(line):
            exception = (index, line)
        elif line.startswith(("ERROR:", "error:", "× ")) and line != "error: subprocess-exited-with-error":
            named.append((index, line))
    found = sorted(named + ([exception] if exception else []))
    return [line for _, line in found] or lines[-1:] or ["no output"]


def node_id(testcase: ElementTree.Element) -> str | None:
    """pytest's node id from an xunit1 testcase (file + classname + name)."""
    file, classname, name = testcase.get("file"), testcase.get("classname", ""), testcase.get("name", "")
    if not file:
        return None
    module = file[:-3].replace("/", ".") if file.endswith(".py") else file
    inner = classname[len(module) :].strip(".") if classname.startswith(module) else ""
    return "::".join([file, *[part for part in inner.split(".") if part], name])


def parse_junit(xml_text: str) -> dict[str, bool]:
    outcomes: dict[str, bool] = {}
    for testcase in ElementTree.fromstring(xml_text).iter("testcase"):
        identifier = node_id(testcase)
        if identifier is None:
            continue
        passed = not any(child.tag in ("failure", "error", "skipped") for child in testcase)
        outcomes[identifier] = outcomes.get(identifier, True) and passed
    return outcomes


def run_tests(
    sb: Sandbox, test_command: str, node_ids: list[str] | None, timeout: float, env: dict[str, str] | None = None
) -> TestRun:
    """Run the suite (node_ids None) or the given tests, with TEST_ENV; a timeout yields a run with `timed_out` set."""
    sb.exec(f"rm -f {JUNIT_PATH}", timeout=30)
    script = f'{test_command} -q -p no:cacheprovider -o junit_family=xunit1 --junitxml={JUNIT_PATH} "$@"'
    result = sb.exec(["sh", "-c", script, "sh", *(node_ids or [])], timeout=timeout, cwd="/workspace", env={**TEST_ENV, **(env or {})})
    run = TestRun(timed_out=result.timed_out, exit_code=result.exit_code, output_tail=(result.stdout + result.stderr)[-2000:])
    if result.timed_out:
        return run
    try:
        run.outcomes = parse_junit(sb.read_file(JUNIT_PATH).decode("utf-8", errors="replace"))
    except Exception as error:  # no report: pytest died before writing one (usage error, crash)
        log.debug("no JUnit report (%s): %s", error, run.output_tail)
    run.executions = len(run.outcomes)
    return run


def coverage_map(sb: Sandbox, test_command: str, packages: list[str], timeout: float) -> tuple[TestRun, dict[str, dict[int, set[str]]]]:
    """One suite run under coverage.py with per-test contexts: path -> line -> node ids that executed it."""
    sb.write_file(f"{PLUGIN_DIR}/regrow_test_context.py", CONTEXT_PLUGIN)
    sb.write_file(COVERAGE_RC, f"[run]\nsource_pkgs = {' '.join(packages)}\nrelative_files = True\ndata_file = {SCRATCH}/coverage.data\n")
    env = {"PYTHONPATH": PLUGIN_DIR, "REGROW_COVERAGE_RC": COVERAGE_RC}
    run = run_tests(sb, f"{test_command} -p regrow_test_context", None, timeout, env=env)
    report = sb.exec(
        f"python -m coverage json --rcfile={COVERAGE_RC} --show-contexts -q -o {COVERAGE_JSON}", timeout=timeout, cwd="/workspace"
    )
    if report.exit_code != 0:
        log.warning("coverage json failed: %s", report.stderr[-500:])
        return run, {}
    data = json.loads(sb.read_file(COVERAGE_JSON))
    lines: dict[str, dict[int, set[str]]] = {}
    for path, info in data.get("files", {}).items():
        contexts = info.get("contexts", {})
        lines[path] = {int(line): {c for c in names if c} for line, names in contexts.items()}
    return run, lines
