"""`regrow traces export --tokens` fills the token columns from a trainer's episode_tokens.jsonl, in every format."""

from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from env_server.traces.store import TraceStore
from proto.actions import ToolCall
from proto.dataset_files import DatasetFormat
from proto.observations import CodingObservation
from proto.traces import EpisodeTokens, EpisodeTrace, StepTrace
from regrow.cli import app as regrow_app
from tests.exported_datasets import load_exported

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Values a float32 column holds exactly, so the Arrow formats read back what was written.
RECORDED = EpisodeTokens(
    episode_id="ep-trained",
    model="smollm2",
    policy_version=3,
    prompt_ids=[1, 2, 3],
    completion_ids=[10, 11, 12, 13],
    logprobs=[-0.5, -0.25, 0.0, -1.0],
    env_mask=[1, 1, 0, 1],
)
UNMATCHED = RECORDED.model_copy(update={"episode_id": "ep-of-another-server"})


def _episode(episode_id: str) -> EpisodeTrace:
    return EpisodeTrace(episode_id=episode_id, task_id="demo", problem_statement="fix it", started_at=T0)


def _step(index: int) -> StepTrace:
    return StepTrace(
        index=index,
        action=ToolCall(tool="run", args={"command": "pytest -q"}),
        observation=CodingObservation(output="1 passed", exit_code=0),
        started_at=T0 + timedelta(seconds=index),
        duration_s=0.5,
    )


@pytest.fixture
def trace_db(tmp_path):
    """Two finished episodes, as the server's TraceStore writes them."""
    path = tmp_path / "traces.sqlite"
    store = TraceStore(path)
    for episode_id in ("ep-trained", "ep-untrained"):
        store.start_episode(_episode(episode_id))
        store.add_step(episode_id, _step(0))
        store.end_episode(episode_id, "submitted", T0 + timedelta(seconds=2), None)
    store.close()
    return path


@pytest.fixture
def tokens_file(tmp_path):
    """A trainer's file: a stale record of ep-trained, the one that wins, and one of an episode not in the db."""
    path = tmp_path / "run" / "episode_tokens.jsonl"
    path.parent.mkdir()
    stale = RECORDED.model_copy(update={"completion_ids": [99], "logprobs": [-9.0], "env_mask": [1]})
    path.write_text("".join(record.model_dump_json() + "\n" for record in (stale, RECORDED, UNMATCHED)))
    return path


def _export(trace_db, out, fmt: DatasetFormat, *tokens):
    args = ["traces", "export", "--db", str(trace_db), "--out", str(out), "--format", fmt.value]
    for path in tokens:
        args += ["--tokens", str(path)]
    return CliRunner().invoke(regrow_app, args)


def _printed(result, text: str) -> bool:
    """Whether the command printed `text`; rich wraps long lines anywhere, even inside a path."""
    return "".join(text.split()) in "".join(result.output.split())


_load = load_exported


@pytest.mark.parametrize("fmt", list(DatasetFormat))
def test_the_trainers_tokens_fill_their_episodes_row_and_leave_the_others_null(trace_db, tokens_file, tmp_path, fmt):
    out = tmp_path / f"episodes.{fmt.value}"
    result = _export(trace_db, out, fmt, tokens_file)

    assert result.exit_code == 0, result.output
    assert _printed(result, "exported 2 episodes")
    assert _printed(result, "1 with the trainer's tokens; 1 token records matched no episode")
    rows = {row["episode_id"]: row for row in _load(fmt, out)}
    trained, untrained = rows["ep-trained"], rows["ep-untrained"]
    for column in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
        assert trained[column] == getattr(RECORDED, column), column
        assert untrained[column] is None, column


def test_without_tokens_every_token_column_is_null(trace_db, tmp_path):
    out = tmp_path / "episodes.parquet"
    result = _export(trace_db, out, DatasetFormat.parquet)

    assert result.exit_code == 0 and _printed(result, "0 with the trainer's tokens")
    for row in _load(DatasetFormat.parquet, out):
        assert [row[c] for c in ("prompt_ids", "completion_ids", "logprobs", "env_mask")] == [None] * 4


def test_a_bad_tokens_line_is_an_error_naming_the_file_and_line_and_writes_nothing(trace_db, tokens_file, tmp_path):
    tokens_file.write_text(RECORDED.model_dump_json() + "\n" + '{"episode_id": "ep-cut", "prompt_ids": [1, 2\n')
    out = tmp_path / "episodes.jsonl"
    result = _export(trace_db, out, DatasetFormat.jsonl, tokens_file)

    assert result.exit_code == 1
    assert _printed(result, "episode_tokens.jsonl line 2") and _printed(result, "fix or delete that line")
    assert not out.exists()


def test_a_missing_tokens_file_is_an_error_that_says_what_to_pass(trace_db, tmp_path):
    out = tmp_path / "episodes.jsonl"
    result = _export(trace_db, out, DatasetFormat.jsonl, tmp_path / "nope.jsonl")

    assert result.exit_code == 1
    assert _printed(result, f"no tokens file at {tmp_path / 'nope.jsonl'}: pass the episode_tokens.jsonl")
    assert not out.exists()


def test_token_files_of_several_runs_are_joined_together(trace_db, tokens_file, tmp_path):
    other_run = tmp_path / "other" / "episode_tokens.jsonl"
    other_run.parent.mkdir()
    other_run.write_text(RECORDED.model_copy(update={"episode_id": "ep-untrained"}).model_dump_json() + "\n")
    out = tmp_path / "episodes.parquet"
    result = _export(trace_db, out, DatasetFormat.parquet, tokens_file, other_run)

    assert result.exit_code == 0 and _printed(result, "2 with the trainer's tokens")
    assert all(row["completion_ids"] == RECORDED.completion_ids for row in _load(DatasetFormat.parquet, out))
