"""One graded run in a fresh container: the change set and the grader's files written in, the launcher started, and
its report read back only when it proves to be the launcher's.

The grader's programs, configs and the pristine tests belong to root and are read-only to the agent's uid; the test
folders and the workspace are sealed (sticky, root-owned), so code under test can add files there but not replace
the tests. Each launch gets its own nonce, in a file the launcher empties before its child starts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from env_server.grading.change_set import ChangeSet, archive_of, folders_above
from proto import call_replay, call_values
from sandbox import Sandbox, SandboxError
from sandbox.layout import AGENT_HOME, WORKSPACE

log = logging.getLogger(__name__)

_INSIDE = Path(__file__).with_name("inside")
# What goes into the grader's folder, by name there: the launcher, its children and the values and replay modules
# they share with synthesis.
PROGRAMS = {
    **{name: _INSIDE / name for name in ("launcher.py", "pytest_child.py", "check_child.py")},
    f"{call_values.SHIPPED_NAME}.py": Path(call_values.__file__),
    f"{call_replay.SHIPPED_NAME}.py": Path(call_replay.__file__),
}
_ROOT_FOLDERS = ("workspace", "home", "home/agent", "opt", "tmp")
_LAUNCH_GRACE_S = 20.0  # the launcher's own start, sweep and report, past its child's deadline


@dataclass(frozen=True)
class GradingFolder:
    """Where one grading keeps its programs, configs and reports: a root-owned folder with a fresh name, at the same
    place in each of its containers."""

    path: str

    @classmethod
    def fresh(cls) -> GradingFolder:
        return cls(f"/opt/.regrow-{secrets.token_hex(8)}")

    def __truediv__(self, name: str) -> str:
        return f"{self.path}/{name}"


@dataclass
class Launched:
    """What one launch's child sent (its JSON lines), or why there is nothing to trust."""

    records: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    child_exit: int | None = None


def write_grading_tree(
    sb: Sandbox, folder: GradingFolder, changes: ChangeSet, pristine_tests: dict[str, bytes], config: dict[str, bytes]
) -> None:
    """The change set, the pristine tests and config (root's), and the grader's programs, into `sb`."""
    for start in range(0, len(changes.deleted), 500):
        sb.exec(["rm", "-f", "--", *changes.deleted[start : start + 500]], timeout=60, cwd=WORKSPACE)
    workspace = {**changes.written, **pristine_tests, **config}
    files = {f"{WORKSPACE[1:]}/{path}": data for path, data in workspace.items()}
    protected = {f"{WORKSPACE[1:]}/{path}" for path in [*pristine_tests, *config]}
    # Every folder above a test, the workspace too, so that none can be renamed away and replaced by forged tests.
    sealed = {WORKSPACE[1:]} | {f"{WORKSPACE[1:]}/{f}" for path in pristine_tests for f in folders_above(path)}
    own = folder.path[1:]
    programs = {f"{own}/{name}": source.read_bytes() for name, source in PROGRAMS.items()}
    executable = {f"{WORKSPACE[1:]}/{path}" for path in changes.executable}
    archive = archive_of(
        {**files, **programs},
        executable,
        _ROOT_FOLDERS,
        root_owned={*protected, *programs, own},
        sealed_folders=sealed,
    )
    sb.import_tree("/", archive)


def launch(
    sb: Sandbox, folder: GradingFolder, kind: str, config: dict[str, Any], env: dict[str, str], timeout_s: float
) -> Launched:
    """Start the launcher on one child (`kind`: "tests" or "checks") and return the child's lines.

    The report counts only when the launcher exited 0 and printed this launch's nonce with the digest of the report
    file it wrote; anything else is an error, however the lines read.
    """
    nonce, tag = secrets.token_hex(16), secrets.token_hex(4)
    paths = {name: folder / f"{kind}-{tag}.{name}" for name in ("json", "nonce", "report")}
    config = {**config, "kind": kind, "cwd": WORKSPACE, "timeout_s": timeout_s, "log": f"/tmp/.{kind}-{tag}.log"}
    own = {paths["json"][1:]: json.dumps(config).encode()}
    agents = {paths["nonce"][1:]: nonce.encode(), paths["report"][1:]: b""}
    # Root owns the config; the nonce and report files are the agent's, since the launcher runs as the agent.
    sb.import_tree("/", archive_of({**own, **agents}, (), ("opt", folder.path[1:]), root_owned=set(own)))
    ran = sb.exec(
        ["python", "-P", folder / "launcher.py", paths["json"], paths["nonce"], paths["report"]],
        timeout=timeout_s + _LAUNCH_GRACE_S,
        cwd=WORKSPACE,
        env={**env, "HOME": AGENT_HOME},
    )
    if ran.timed_out:
        return Launched(error=f"the {kind} launcher ran past {timeout_s + _LAUNCH_GRACE_S:g}s")
    signed = [line.split() for line in ran.stdout.splitlines() if line.startswith(nonce)]
    if ran.exit_code != 0 or len(signed) != 1 or len(signed[0]) != 2:
        return Launched(error=f"the {kind} launcher failed (exit {ran.exit_code}): {ran.stderr.strip()[-300:]}")
    try:
        text = sb.read_file(paths["report"])
    except SandboxError as error:
        return Launched(error=f"the {kind} launcher's report could not be read: {error}")
    if hashlib.sha256(text).hexdigest() != signed[0][1]:
        return Launched(error=f"the {kind} report was changed after the launcher wrote it")
    report = json.loads(text)
    records = []
    for line in report["lines"]:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    exit_code = report["child_exit"]
    if report["timed_out"]:
        return Launched(records, f"the {kind} ran past {timeout_s:g}s", exit_code)
    if report["overflow"]:
        return Launched(records, f"the {kind} sent more than the launcher keeps", exit_code)
    if not records:
        return Launched(error=f"the {kind} child sent nothing (exit {exit_code}): {_log_tail(sb, config)}")
    return Launched(records, child_exit=exit_code)


def _log_tail(sb: Sandbox, config: dict[str, Any]) -> str:
    try:
        return sb.read_file(config["log"])[-300:].decode("utf-8", errors="replace").strip()
    except SandboxError:
        return "no log"
