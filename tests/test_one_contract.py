"""Ideas that cross the parts' boundaries are declared once, in proto/, and read from there: a pass is
`proto.is_pass` (its bar `proto.PASS_REWARD`), never a reward compared with 1.0 on the spot. Read from the source
with a pattern (no import)."""

import re
from pathlib import Path

import pytest

from env_server.harbor.export import SHIPPED_UNCHANGED

ROOT = Path(__file__).parent.parent
PARTS = ("sandbox", "task_synth", "env_server", "trainer_client", "regrow")
# A reward (or a pass rate's reward) held against 1.0 where it is read: a second definition of a pass.
LOCAL_PASS = re.compile(r"reward\w*\W{0,3}\s*(>=|==|>)\s*1(\.0)?\b|^\s*PASS\w*\s*=\s*1\.0", re.MULTILINE)


@pytest.mark.parametrize("part", PARTS)
def test_a_pass_is_defined_once_in_proto_and_nowhere_else(part):
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in sorted((ROOT / part).rglob("*.py"))
        for match in LOCAL_PASS.finditer(path.read_text())
    ]
    assert not found, f"count a pass with proto.is_pass, not on the spot: {found}"


# Inside a Harbor verifier's container the grader runs alone, without sandbox/: its own scripts, and the modules the
# export ships unchanged beside them.
STANDALONE = ("env_server/harbor/inside/", *SHIPPED_UNCHANGED)
# The path as a value: closed by its quote, or going on into a file below it (prose about it is left alone).
WORKSPACE_LITERAL = re.compile(r"""["'][^"'\n]{0,80}/workspace(?=["'/])""")


@pytest.mark.parametrize("part", PARTS)
def test_the_workspace_path_is_declared_once_a_side_and_read_from_there(part):
    """sandbox.layout.WORKSPACE (sandbox, task_synth, env_server, regrow) and proto.transcript.WORKSPACE (the
    trainer, which imports no sandbox), held equal by a test of the transcript."""
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in sorted((ROOT / part).rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(STANDALONE) and path.name != "layout.py"
        for match in WORKSPACE_LITERAL.finditer(path.read_text())
    ]
    assert not found, f"read WORKSPACE from sandbox.layout or proto.transcript: {found}"
