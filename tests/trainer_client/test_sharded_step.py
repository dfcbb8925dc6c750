"""The trainer's step with its weights sharded by FSDP2 over two CPU ranks (gloo), whose hinted turns and DPO pairs
differ in number: it neither hangs nor drifts from one unsharded process's step on both ranks' rows."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from regrow.bench.sharded_training import update_gap
from trainer_client.channels.hinted_self import LIVE_ROWS_PER_PASS

pytestmark = pytest.mark.train

ROOT = Path(__file__).parents[2]


def test_two_sharded_ranks_with_unequal_hinted_turns_and_pairs_take_one_unsharded_process_steps(tmp_path):
    """Before, every forward of the SDPO teacher and the DPO pairs ran as often as the rank's own data asked: the
    ranks' weight gathers fell out of step and the run hung (or, through another forward's keys, crashed)."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    command = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "tests.trainer_client.rank_sharded_step"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*command, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"steps{rank}.pt") for rank in range(2)]
    start = ranks[0][-1]["start"]
    # each rank's loss logs its own hinted turns last: two teacher forwards' worth on rank 0, none on rank 1
    assert ranks[0][-1]["hinted_turns"][-1] > LIVE_ROWS_PER_PASS and ranks[1][-1]["hinted_turns"][-1] == 0
    for step in range(2):
        sharded, alone = ranks[0][step]["sharded"], ranks[0][step]["alone"]
        assert all(torch.equal(sharded[name], ranks[1][step]["sharded"][name]) for name in sharded)
        # float64: the sums differ in order only, measured 1e-9 of the update; a term lost or doubled is 1e-3 or more
        assert update_gap(sharded, alone, start) < 1e-6
