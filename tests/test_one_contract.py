"""Ideas that cross the parts' boundaries are declared once, in proto/, and read from there: a pass is
`proto.is_pass` (its bar `proto.PASS_REWARD`), never a reward compared with 1.0 on the spot. Read from the source
with a pattern (no import)."""

import re
from pathlib import Path

import pytest

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
