"""`regrow traces export` writes datasets that Hugging Face `datasets` loads, in every format, with no Docker."""

import json
import sys
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from env_server.traces.datasets import REWARD_DETAILS
from env_server.traces.export import TraceExportError, export_traces
from env_server.traces.store import TraceStore
from proto.actions import TOOL_ARGS, ToolCall
from proto.dataset_files import DatasetFormat
from proto.observations import CodingObservation, RewardDetails
from proto.observations import TestOutcome as Outcome  # not collected as a test class
from proto.traces import EpisodeTrace, StepTrace
from proto.transcript import prefix_history, prefix_messages, system_prompt, transcript
from regrow.cli import app as regrow_app
from tests.exported_datasets import load_exported, load_saved
from tests.replay.recorded_traces import START, recorded_traces
from trainer_client.replay.replay_run import read_traces

DETAILS = RewardDetails(
    reward=1.0,
    mode="fraction",
    f2p_passed=1,
    f2p_total=1,
    p2p_passed=1,
    p2p_total=1,
    tests=[
        Outcome(nodeid="tests/test_core.py::test_add", outcome="passed", group="FAIL_TO_PASS"),
        Outcome(nodeid="tests/test_core.py::test_sub", outcome="passed", group="PASS_TO_PASS"),
    ],
)


def _step(index: int, tool: str, args: dict, turn: int, **observation) -> StepTrace:
    return StepTrace(
        index=index,
        action=ToolCall(tool=tool, args=args, metadata={"turn": turn}),
        observation=CodingObservation(**observation),
        started_at=START + timedelta(seconds=index),
        duration_s=0.25,
    )


def solved_episode() -> EpisodeTrace:
    """Two calls in the model's first turn, a truncated run, then a graded submit."""
    return EpisodeTrace(
        episode_id="ep-3",
        task_id="mathlib-add",
        problem_statement="Make add return the sum.",
        tools=recorded_traces()[0].tools,
        steps=[
            _step(0, "read_file", {"path": "mathlib/core.py", "start_line": 1}, 0, output="def add(a, b): ..."),
            _step(1, "edit_file", {"path": "mathlib/core.py", "old": "...", "new": "return a + b"}, 0),
            _step(2, "run", {"command": "pytest -q"}, 1, output="1 passed", exit_code=0, truncated=True),
            _step(3, "submit", {}, 2, output="submitted", done=True, feedback="all tests pass"),
        ],
        status="submitted",
        reward=1.0,
        reward_details=DETAILS,
        started_at=START,
        ended_at=START + timedelta(seconds=5),
    )


@pytest.fixture
def trace_db(tmp_path):
    """A trace database with three finished episodes, written through the server's TraceStore."""
    path = tmp_path / "traces.sqlite"
    store = TraceStore(path)
    for trace in [*recorded_traces(), solved_episode()]:
        store.start_episode(trace)
        for step in trace.steps:
            store.add_step(trace.episode_id, step)
        store.end_episode(trace.episode_id, trace.status, trace.ended_at, trace.reward_details)
    store.close()
    return path


load = load_exported


@pytest.mark.parametrize("fmt", list(DatasetFormat))
def test_every_format_loads_with_datasets_one_row_per_episode(trace_db, tmp_path, fmt):
    out = tmp_path / f"episodes.{fmt.value}"
    assert export_traces(trace_db, out, fmt).episodes == 3
    rows = {row["episode_id"]: row for row in load(fmt, out)}
    assert set(rows) == {"ep-1", "ep-2", "ep-3"}
    solved = rows["ep-3"]
    assert solved["task_id"] == "mathlib-add" and solved["reward"] == 1.0 and solved["done"] is True
    assert solved["num_steps"] == 4 and solved["duration_s"] == 5.0
    assert [m["role"] for m in solved["messages"]] == ["system", "user", *["assistant", "user"] * 3]
    assert solved["messages"][1]["content"] == "Make add return the sum."
    assert [t["tool_name"] for t in solved["tool_trace"]] == ["read_file", "edit_file", "run", "submit"]
    assert [t["outcome"] for t in solved["reward_details"]["tests"]] == ["passed", "passed"]
    assert solved["completion_ids"] is None and solved["logprobs"] is None
    assert [tool["function"]["name"] for tool in json.loads(solved["tools_json"])] == list(TOOL_ARGS)


@pytest.mark.parametrize("fmt", list(DatasetFormat))
def test_the_exported_messages_are_the_transcript_the_policy_saw_word_for_word(trace_db, tmp_path, fmt):
    """The export and the trainer render an episode with the same code: same system prompt, same tool responses."""
    out = tmp_path / f"episodes.{fmt.value}"
    export_traces(trace_db, out, fmt)
    rows = {row["episode_id"]: row for row in load(fmt, out)}
    for trace in [*recorded_traces(), solved_episode()]:
        exported = [{"role": m["role"], "content": m["content"]} for m in rows[trace.episode_id]["messages"]]
        assert exported == transcript(trace)
    assert rows["ep-3"]["messages"][0]["content"] == system_prompt(solved_episode().tools)


def test_calls_of_one_model_turn_share_one_assistant_message_and_one_reply_message(trace_db, tmp_path):
    export_traces(trace_db, tmp_path / "out.parquet", DatasetFormat.parquet)
    messages = next(r for r in load(DatasetFormat.parquet, tmp_path / "out.parquet") if r["episode_id"] == "ep-3")[
        "messages"
    ]
    first_turn, replies = messages[2]["content"], messages[3]["content"]
    assert first_turn.count("<tool_call>") == 2 and '"read_file"' in first_turn and '"edit_file"' in first_turn
    assert replies.count("<tool_response>") == 2


def test_feedback_sits_beside_the_replies_never_inside_them(trace_db, tmp_path):
    export_traces(trace_db, tmp_path / "out.parquet", DatasetFormat.parquet)
    rows = {r["episode_id"]: r for r in load(DatasetFormat.parquet, tmp_path / "out.parquet")}
    replies = [m for m in rows["ep-3"]["messages"] if m["role"] == "user"][1:]
    assert replies[1]["content"] == "<tool_response>\n1 passed\n[exit code: 0]\n[output truncated]\n</tool_response>"
    assert replies[2]["content"] == "<tool_response>\nsubmitted\n[episode finished]\n</tool_response>"
    assert replies[2]["feedback"] == "all tests pass" and replies[0]["feedback"] is None
    assert all("feedback" not in m["content"] for m in rows["ep-3"]["messages"][1:])
    bad_edit = rows["ep-2"]["tool_trace"][1]["result"]
    assert bad_edit["feedback"].startswith("edit_file: `old` text not found") and bad_edit["exit_code"] is None


def test_jsonl_rows_are_still_the_episode_traces_trace_replay_reads(trace_db, tmp_path):
    out = tmp_path / "traces.jsonl"
    export_traces(trace_db, out, DatasetFormat.jsonl)
    replayed = {trace.episode_id: trace for trace in read_traces(out)}
    assert replayed["ep-3"] == solved_episode()
    assert replayed["ep-1"].steps == recorded_traces()[0].steps


def test_reward_details_columns_are_the_proto_models_fields():
    assert REWARD_DETAILS.names == list(RewardDetails.model_fields)


def test_a_missing_database_is_an_error_and_is_not_created(tmp_path):
    with pytest.raises(TraceExportError, match="no trace database"):
        export_traces(tmp_path / "nope.sqlite", tmp_path / "out.jsonl", DatasetFormat.jsonl)
    assert list(tmp_path.iterdir()) == []


def test_a_database_with_no_episodes_is_an_error_and_writes_nothing(tmp_path):
    TraceStore(tmp_path / "empty.sqlite").close()
    with pytest.raises(TraceExportError, match="holds no episodes"):
        export_traces(tmp_path / "empty.sqlite", tmp_path / "out.parquet", DatasetFormat.parquet)
    assert not (tmp_path / "out.parquet").exists()


def test_an_existing_output_is_kept_unless_forced(trace_db, tmp_path):
    out = tmp_path / "episodes"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = CliRunner().invoke(
        regrow_app, ["traces", "export", "--db", str(trace_db), "--out", str(out), "--format", "hf"]
    )
    assert result.exit_code == 1 and "already exists" in result.output and "--force" in result.output
    assert (out / "keep.txt").read_text() == "mine"
    forced = ["traces", "export", "--db", str(trace_db), "--out", str(out), "--format", "hf", "--force"]
    assert CliRunner().invoke(regrow_app, forced).exit_code == 0
    assert load_saved(out).num_rows == 3 and not (out / "keep.txt").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".episodes")]  # no partial or old copy left


def test_hf_without_datasets_installed_says_how_to_install_it_and_writes_nothing(trace_db, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # what an env server image without datasets has
    with pytest.raises(ImportError, match="pip install 'datasets>=5.2'"):
        export_traces(trace_db, tmp_path / "out", DatasetFormat.hf)
    assert not [p for p in tmp_path.iterdir() if "out" in p.name]


@pytest.mark.parametrize("fmt", list(DatasetFormat))
def test_a_prefix_resets_episode_is_exported_with_the_prefix_its_policy_was_shown(trace_db, tmp_path, fmt):
    """An episode started after 2 steps of ep-3: its messages hold those steps as the trainer rendered them (from the
    reset's history), then its own turns; the columns name the origin."""
    prefixed = EpisodeTrace(
        episode_id="ep-4",
        task_id="mathlib-add",
        problem_statement="Make add return the sum.",
        tools=recorded_traces()[0].tools,
        steps=[_step(0, "submit", {}, 0, output="submitted", done=True)],
        status="submitted",
        reward=1.0,
        reward_details=DETAILS,
        started_at=START + timedelta(seconds=10),
        ended_at=START + timedelta(seconds=11),
        prefix_of="ep-3",
        prefix_steps=2,
        origin="prefix",
        run_id="run-a",
    )
    store = TraceStore(trace_db)
    store.start_episode(prefixed)
    store.add_step("ep-4", prefixed.steps[0])
    store.end_episode("ep-4", "submitted", prefixed.ended_at, DETAILS)
    store.close()
    out = tmp_path / f"episodes.{fmt.value}"
    export_traces(trace_db, out, fmt)
    rows = {row["episode_id"]: row for row in load(fmt, out)}
    shown = prefix_messages({"history": prefix_history(solved_episode(), 2)})
    exported = [{"role": m["role"], "content": m["content"]} for m in rows["ep-4"]["messages"]]
    assert exported[2:6] == shown and '"name": "edit_file"' in exported[4]["content"]
    assert exported[:2] == transcript(prefixed)[:2] and exported[6:] == transcript(prefixed)[2:]
    assert (rows["ep-4"]["prefix_of"], rows["ep-4"]["prefix_steps"]) == ("ep-3", 2)
    assert rows["ep-3"]["prefix_of"] is None and rows["ep-3"]["prefix_steps"] == 0
    assert (rows["ep-4"]["origin"], rows["ep-4"]["run_id"]) == ("prefix", "run-a")
    assert (rows["ep-3"]["origin"], rows["ep-3"]["run_id"]) == ("training", None)
