"""`regrow bench load` against its own `regrow serve`: minutes of whole episodes leave no errors, no containers and
no memory growing with the episodes; a server with fewer slots than clients answers CAPACITY_REACHED and nothing else.
"""

import json

import pytest
from typer.testing import CliRunner

from regrow.bench.load import LoadPlan, run_load_bench
from regrow.cli import app as regrow_app

pytestmark = pytest.mark.docker


def test_four_clients_for_75_seconds_leave_no_errors_no_containers_and_flat_memory(demo_task_store):
    # The memory's slope is fitted over a sample every 5 s after the warm-up; `regrow bench load` runs longer.
    result = run_load_bench(LoadPlan(demo_task_store, clients=4, steps=8, duration_s=75, warmup_s=15, sample_every_s=5))
    assert result["errors"] == {}, result["error_examples"]
    assert result["capacity_reached"] == 0
    assert result["containers_left_after_stop"] == 0
    assert result["episodes"] >= 4
    assert set(result["step_latency"]) == {
        "all",
        "run",
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "search",
        "submit",
    }
    rss = result["rss"]
    # Measured about 0.2 MiB an episode; a leak of a container's worth of state per episode is far above 0.6.
    assert rss["mib_per_episode"] is not None and rss["mib_per_episode"] < 0.6, rss


def test_three_clients_on_two_slots_are_told_capacity_reached_and_nothing_else(demo_task_store):
    outcome = CliRunner().invoke(
        regrow_app,
        [
            "bench",
            "load",
            "--tasks",
            str(demo_task_store),
            "--episodes",
            "3",
            "--slots",
            "2",
            "--steps",
            "3",
            "--duration",
            "20",
            "--warmup",
            "0",
            "--max-errors",
            "0",
            "--json",
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    result = json.loads(outcome.stdout[outcome.stdout.index("{") :])
    assert result["capacity_reached"] >= 1
    assert result["errors"] == {}, result["error_examples"]
    assert result["episodes"] >= 2
    assert result["containers_left_after_stop"] == 0


def test_a_load_run_with_errors_shows_what_the_server_warned_of_and_removed(tmp_path):
    from regrow.bench.load import server_warnings

    log = tmp_path / "server.log"
    log.write_text(
        '{"level": "INFO", "message": "127.0.0.1:1 - \\"WebSocket /ws\\" [accepted]"}\n'
        '{"level": "INFO", "logger": "sandbox.lifecycle.reaper", "message": "reaping sandbox bee2b9dfab2f: ours"}\n'
        '{"level": "WARNING", "message": "episode 1 lost its sandbox bee2b9dfab2f: its container was removed"}\n'
    )
    assert [line.count("bee2b9dfab2f") for line in server_warnings(log)] == [1, 1]
    assert server_warnings(tmp_path / "missing.log")[0].startswith("the server's log could not be read")
