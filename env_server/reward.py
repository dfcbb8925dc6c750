"""Grades a submission: the agent's source diff, applied in a fresh container with the pristine tests."""

from __future__ import annotations

import logging
import posixpath
import re
import secrets
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass

from env_server.task_store import Task
from proto.observations import RewardDetails, TestOutcome
from sandbox import Sandbox, SandboxError, SandboxFileNotFound

log = logging.getLogger(__name__)

WORKSPACE = "/workspace"
_DIFF = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]
_CONFIG_FILES = {"pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "noxfile.py"}
_STARTUP_FILES = {"sitecustomize.py", "usercustomize.py"}


def is_protected(path: str, test_files: list[str]) -> bool:
    """True for files that decide how tests run rather than what the code does; their edits are not graded."""
    name = posixpath.basename(path)
    parts = path.split("/")
    return (
        path in test_files
        or name == "conftest.py"
        or name in _CONFIG_FILES
        or name in _STARTUP_FILES
        or name.endswith(".pth")
        or (name.startswith("test_") and name.endswith(".py"))
        or name.endswith("_test.py")
        or any(part in ("tests", "test", "testing") for part in parts[:-1])
    )


@dataclass
class SplitDiff:
    graded: str
    ignored_paths: list[str]


_FILE_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+)$")


def split_diff(diff: str, test_files: list[str]) -> SplitDiff:
    """Drop the file sections of `diff` that touch protected paths; list what was dropped."""
    kept: list[str] = []
    ignored: list[str] = []
    keep = True
    for section in re.split(r"(?m)^(?=diff --git )", diff):
        header = _FILE_HEADER.match(section.split("\n", 1)[0])
        if not header:
            continue
        paths = {header.group(1), header.group(2)}
        keep = not any(is_protected(p, test_files) for p in paths)
        (kept.append(section) if keep else ignored.extend(sorted(paths)))
    return SplitDiff(graded="".join(kept), ignored_paths=sorted(set(ignored)))


def source_diff(sb: Sandbox) -> str:
    """Every change the agent made to /workspace since the task's single commit, as a binary-safe diff."""
    staged = sb.exec([*_DIFF, "add", "-A"], timeout=60, cwd=WORKSPACE)
    if staged.exit_code != 0:
        raise SandboxError(f"git add failed in the agent's workspace: {staged.stderr.strip()[:300]}")
    # Through a file, not stdout: a large diff must not be cut at the exec output cap.
    out = f"/home/agent/.diff-{secrets.token_hex(8)}.patch"
    diff = sb.exec(
        [*_DIFF, "diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv", "--no-renames", f"--output={out}", "HEAD"],
        timeout=60,
        cwd=WORKSPACE,
    )
    if diff.exit_code != 0:
        raise SandboxError(f"could not take the agent's diff (git exit {diff.exit_code}): {diff.stderr.strip()[:300]}")
    return sb.read_file(out).decode("utf-8", errors="surrogateescape")


def junit_nodeid_key(nodeid: str) -> tuple[str, str]:
    """The (classname, name) pair pytest's JUnit report uses for `nodeid`."""
    path, *rest = nodeid.split("::")
    module = path[:-3] if path.endswith(".py") else path
    classname = ".".join([module.replace("/", "."), *rest[:-1]])
    return classname, rest[-1] if rest else ""


def parse_junit(xml_text: str) -> dict[tuple[str, str], str]:
    """Outcome of each test case in a JUnit report, keyed by (classname, name)."""
    outcomes = {}
    for case in ElementTree.fromstring(xml_text).iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = "failed" if "failure" in kinds else "error" if "error" in kinds else "skipped" if "skipped" in kinds else "passed"
        outcomes[(case.get("classname", ""), case.get("name", ""))] = outcome
    return outcomes


def score(task: Task, outcomes: dict[tuple[str, str], str], mode: str) -> RewardDetails:
    """Fraction of FAIL_TO_PASS passed, 0 if any PASS_TO_PASS broke; binary mode pays 1 only for all."""
    tests = []
    for group, nodeids in (("FAIL_TO_PASS", task.record.FAIL_TO_PASS), ("PASS_TO_PASS", task.record.PASS_TO_PASS)):
        for nodeid in nodeids:
            tests.append(TestOutcome(nodeid=nodeid, outcome=outcomes.get(junit_nodeid_key(nodeid), "missing"), group=group))
    f2p = [t for t in tests if t.group == "FAIL_TO_PASS"]
    p2p = [t for t in tests if t.group == "PASS_TO_PASS"]
    f2p_passed = sum(t.outcome == "passed" for t in f2p)
    p2p_passed = sum(t.outcome == "passed" for t in p2p)
    p2p_intact = p2p_passed == len(p2p)
    if mode == "binary":
        reward = float(p2p_intact and f2p_passed == len(f2p))
    else:
        reward = f2p_passed / len(f2p) if f2p and p2p_intact else 0.0
    return RewardDetails(
        reward=reward, mode=mode, f2p_passed=f2p_passed, f2p_total=len(f2p), p2p_passed=p2p_passed, p2p_total=len(p2p), tests=tests
    )


def failing_summary(details: RewardDetails, limit: int = 5) -> str | None:
    """The end-of-episode hint: which tests still fail."""
    if details.error:
        return f"grading failed: {details.error}"
    failing = [t for t in details.tests if t.outcome != "passed"]
    if not failing:
        return None
    names = ", ".join(f"{t.nodeid} ({t.outcome})" for t in failing[:limit])
    more = f" and {len(failing) - limit} more" if len(failing) > limit else ""
    return f"{len(failing)} of {len(details.tests)} tests fail: {names}{more}"


def grade(
    task: Task, diff: str, fresh_sandbox: Callable[[], Sandbox], mode: str = "fraction", timeout_s: float = 300.0
) -> RewardDetails:
    """Apply the graded part of `diff` in a fresh sandbox, restore pristine tests, run F2P + P2P, score."""
    split = split_diff(diff, task.record.test_files)
    empty = RewardDetails(reward=0.0, mode=mode, f2p_passed=0, f2p_total=len(task.record.FAIL_TO_PASS), p2p_passed=0,
                          p2p_total=len(task.record.PASS_TO_PASS), ignored_paths=split.ignored_paths)
    # A fresh name per grading, outside the workspace: nothing in the submission can pre-place or fake it.
    grading_dir = f"/home/agent/.grading-{secrets.token_hex(8)}"
    with fresh_sandbox() as sb:
        if split.graded:
            sb.write_file(f"{grading_dir}/submission.patch", split.graded.encode("utf-8", errors="surrogateescape"))
            applied = sb.exec(["git", "apply", "--whitespace=nowarn", f"{grading_dir}/submission.patch"], timeout=60, cwd=WORKSPACE)
            if applied.exit_code != 0:
                return empty.model_copy(update={"error": f"the submission's diff did not apply: {applied.stderr.strip()[:300]}"})
        for path, data in task.pristine_tests().items():
            sb.write_file(posixpath.join(WORKSPACE, path), data)
        nodeids = [*task.record.FAIL_TO_PASS, *task.record.PASS_TO_PASS]
        junit = f"{grading_dir}/junit.xml"
        command = f"{task.record.test_command} --junitxml={junit} " + " ".join(_quote(n) for n in nodeids)
        ran = sb.exec(command, timeout=timeout_s, cwd=WORKSPACE)
        if ran.timed_out:
            return empty.model_copy(update={"error": f"the tests ran past {timeout_s:g}s"})
        try:
            report = sb.read_file(junit).decode("utf-8", errors="replace")
            outcomes = parse_junit(report)
        except (SandboxFileNotFound, ElementTree.ParseError) as error:
            log.info("no usable JUnit report for %s: %s", task.id, error)
            outcomes = {}
    details = score(task, outcomes, mode)
    return details.model_copy(update={"ignored_paths": split.ignored_paths})


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
