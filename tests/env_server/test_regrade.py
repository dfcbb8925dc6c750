"""`regrow traces regrade` on the real engine: stored episodes graded again earn what they earned, and a reward forged
in the trace database is reported changed and lowered."""

import json
import sqlite3
from contextlib import closing

import pytest
from typer.testing import CliRunner

from env_server.lifecycle.reset_options import ResetOptions
from proto.actions import ToolCall
from regrow.cli import app
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS, WRONG_OPS

pytestmark = pytest.mark.docker


def play(runtime, ops_source: str) -> tuple[str, float | None]:
    """An episode that writes `ops_source` to calc/ops.py and submits: its id and its reward."""
    episode = runtime.start_episode(ResetOptions(task_id=DEMO_TASK_ID))
    runtime.take_step(episode, ToolCall(tool="write_file", args={"path": "calc/ops.py", "content": ops_source}))
    final = runtime.take_step(episode, ToolCall(tool="submit"))
    assert final.done
    return episode.id, final.reward


@pytest.fixture(scope="module")
def played(runtime):
    """An honest episode and a wrong one, graded and stored; their ids."""
    honest, honest_reward = play(runtime, ORIGINAL_OPS)
    wrong, wrong_reward = play(runtime, WRONG_OPS)
    assert (honest_reward, wrong_reward) == (1.0, 0.0)
    return {"honest": honest, "wrong": wrong}


def regrade(runtime, demo_task_store, *episodes: str) -> dict:
    """The command's JSON for `episodes`, run against the runtime's own trace database."""
    arguments = ["traces", "regrade", "--tasks", str(demo_task_store), "--traces", str(runtime.settings.trace_path())]
    for episode_id in episodes:
        arguments += ["--episode", episode_id]
    outcome = CliRunner().invoke(app, [*arguments, "--json"])
    assert outcome.exit_code == 0, outcome.output
    return json.loads(outcome.stdout)


def test_stored_episodes_graded_again_earn_what_they_earned(runtime, demo_task_store, played):
    report = regrade(runtime, demo_task_store, played["honest"], played["wrong"])
    rewards = {row["episode_id"]: (row["old_reward"], row["new_reward"], row["changed"]) for row in report["episodes"]}
    assert rewards == {played["honest"]: (1.0, 1.0, False), played["wrong"]: (0.0, 0.0, False)}
    assert {row["source"] for row in report["episodes"]} == {"change_set"}
    assert {row["new_basis"] for row in report["episodes"]} == {"checks"}
    assert report["totals"] == {"regraded": 2, "changed": 0, "lowered": 0, "raised": 0, "failed": 0, "skipped": 0}


def forge(runtime, sql: str, episode_id: str) -> None:
    """Change the trace database behind the server's back, as someone with the file could."""
    with closing(sqlite3.connect(runtime.settings.trace_path())) as db, db:
        db.execute(sql, (episode_id,))


def test_an_episode_stored_before_change_sets_were_kept_is_graded_from_its_diff(runtime, demo_task_store):
    older, reward = play(runtime, ORIGINAL_OPS)
    forge(runtime, "DELETE FROM submissions WHERE episode_id = ?", older)
    (row,) = regrade(runtime, demo_task_store, older)["episodes"]
    assert reward == 1.0 and (row["source"], row["new_reward"], row["changed"]) == ("diff", 1.0, False), row


def test_a_reward_forged_in_the_database_is_reported_changed_and_lowered(runtime, demo_task_store, played):
    forge(runtime, "UPDATE episodes SET reward = 1.0 WHERE episode_id = ?", played["wrong"])
    report = regrade(runtime, demo_task_store, played["wrong"], "no-such-episode")
    (row,) = report["episodes"]
    assert (row["old_reward"], row["new_reward"], row["changed"]) == (1.0, 0.0, True), row
    assert report["totals"]["lowered"] == 1 and report["totals"]["changed"] == 1
    assert [skipped["episode_id"] for skipped in report["skipped"]] == ["no-such-episode"]
