"""A replay run over two recorded traces: decisions, pairs with reference logprobs, gating, the cap, the report."""

import asyncio
import math

import pytest
import torch

from proto.actions import ToolCall
from proto.transcript import ASSISTANT_TEXT_KEY, PARSE_ERROR_KEY, TURN_KEY, format_tool_call, transcript
from tests.replay.recorded_traces import recorded_traces
from tests.replay.tool_caller import READ_CORE
from trainer_client.channels.dpo_loss import completion_logps
from trainer_client.channels.preference_pairs import encode_pair
from trainer_client.replay.action_key import action_key
from trainer_client.replay.policy_scorer import PolicyScorer
from trainer_client.replay.replay_run import ReplayRun, ReplaySettings, turn_starts
from trainer_client.replay.spending import SpendingCap
from trainer_client.replay.teachers import open_teacher
from trainer_client.replay.teachers_config import HFTeacherConfig, OpenAITeacherConfig

pytestmark = pytest.mark.train

# The student's turns in the recorded traces: list_dir, submit | run, edit_file, read_file(core.py).
TURNS = 5


@pytest.fixture(scope="module")
def scorer(tiny_model_dir) -> PolicyScorer:
    return PolicyScorer(tiny_model_dir)


def replay(configs, scorer, settings=ReplaySettings(), cap_usd=None, traces=None):
    """Run the replay over `traces` (default: the recorded ones); returns (report, pairs)."""
    pairs = []

    async def go():
        teachers = [(config, open_teacher(config)) for config in configs]
        try:
            run = ReplayRun(teachers, scorer, settings, SpendingCap(cap_usd), concurrency=2, emit=pairs.append)
            return await run.run(traces or recorded_traces())
        finally:
            for _, teacher in teachers:
                await teacher.aclose()

    return asyncio.run(go()), pairs


def hf(name, path, **overrides):
    return HFTeacherConfig(name=name, path=path, **overrides)


def served(name, openai_server, **overrides):
    base_url, model = openai_server
    return OpenAITeacherConfig(name=name, base_url=base_url, model=model, **overrides)


def test_unanimous_teachers_give_a_pair_wherever_the_student_differs(
    read_teacher_dir, openai_server, scorer, tiny_model_dir
):
    report, pairs = replay([hf("local", read_teacher_dir), served("served", openai_server)], scorer)
    assert report.decisions["pair"] == 4
    assert report.decisions["student_agrees"] == 1  # ep-2 read core.py itself at its last step
    assert [(p.trace_id, p.step_index) for p in pairs] == [("ep-1", 0), ("ep-1", 1), ("ep-2", 0), ("ep-2", 1)]
    assert all(action_key(p.chosen) == action_key(READ_CORE) and p.teachers == ["local", "served"] for p in pairs)
    assert [p.rejected.tool for p in pairs] == ["list_dir", "submit", "run", "edit_file"]
    assert {t.trace_id: t.pairs for t in report.traces} == {"ep-1": 2, "ep-2": 2}
    assert report.teacher_calls == 2 * TURNS
    assert report.teachers["served"].answered == TURNS and report.teachers["served"].errors == {}
    assert report.step_latency.count == TURNS and report.step_latency.p95_s >= report.step_latency.p50_s > 0
    assert report.teachers["local"].latency.p50_s > 0


def test_stored_reference_logprobs_are_the_policys_logprobs_of_both_actions(read_teacher_dir, scorer, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, pairs = replay([hf("local", read_teacher_dir)], scorer)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    encoded = [encode_pair(pair, tokenizer) for pair in pairs]
    with torch.no_grad():
        chosen = completion_logps(policy, [(e.prompt_ids, e.chosen_ids) for e in encoded], tokenizer.pad_token_id)
        rejected = completion_logps(policy, [(e.prompt_ids, e.rejected_ids) for e in encoded], tokenizer.pad_token_id)
    assert chosen.tolist() == pytest.approx([p.reference_chosen_logp for p in pairs], abs=1e-4)
    assert rejected.tolist() == pytest.approx([p.reference_rejected_logp for p in pairs], abs=1e-4)
    assert all(math.isfinite(p.reference_chosen_logp) and p.reference_chosen_logp < 0 for p in pairs)


def test_teachers_split_evenly_make_ties_and_no_pairs(read_teacher_dir, run_teacher_dir, scorer):
    report, pairs = replay([hf("reader", read_teacher_dir), hf("runner", run_teacher_dir)], scorer)
    assert pairs == []
    assert report.decisions["tie"] == TURNS


def test_a_two_thirds_majority_passes_a_lower_threshold_only(read_teacher_dir, run_teacher_dir, openai_server, scorer):
    teachers = [hf("reader", read_teacher_dir), served("served", openai_server), hf("runner", run_teacher_dir)]
    report, pairs = replay(teachers, scorer, ReplaySettings(min_agreement=0.6))
    assert report.decisions["pair"] == 4 and report.decisions["student_agrees"] == 1
    assert all(p.teachers == ["reader", "served"] and p.agreement == pytest.approx(2 / 3) for p in pairs)
    strict, none = replay(teachers, scorer, ReplaySettings(min_agreement=0.7))
    assert none == []
    assert strict.decisions["below_threshold"] == 4 and strict.decisions["student_agrees"] == 1


def test_a_failing_teacher_blocks_every_pair_and_its_errors_are_counted(read_teacher_dir, scorer):
    down = OpenAITeacherConfig(name="down", base_url="http://127.0.0.1:9/v1", model="m", max_retries=0)
    report, pairs = replay([hf("local", read_teacher_dir), down], scorer)
    assert pairs == []
    assert report.decisions["teacher_error"] == TURNS
    assert report.teachers["down"].errors == {"connection": TURNS}
    assert report.teachers["local"].errors == {}


def test_a_teacher_failing_too_many_calls_in_a_row_stops_the_run_before_the_other_turns(read_teacher_dir, scorer):
    down = OpenAITeacherConfig(name="down", base_url="http://127.0.0.1:9/v1", model="m", max_retries=0)
    pairs = []

    async def go():
        teachers = [(config, open_teacher(config)) for config in (hf("local", read_teacher_dir), down)]
        try:
            run = ReplayRun(teachers, scorer, ReplaySettings(), SpendingCap(None), 2, pairs.append, 2)
            return await run.run(recorded_traces())
        finally:
            for _, teacher in teachers:
                await teacher.aclose()

    report = asyncio.run(go())
    assert report.teachers["down"].calls == 2 and report.teachers["local"].calls == 2
    assert report.decisions["teacher_error"] == 2 and report.decisions["teacher_stopped"] == TURNS - 2
    assert report.stopped_by_teacher and "'down' failed 2 calls in a row" in report.stopped_by_teacher
    assert pairs == []


def test_gating_skips_teachers_where_the_student_was_sure(read_teacher_dir, scorer):
    gated, pairs = replay([hf("local", read_teacher_dir)], scorer, ReplaySettings(entropy_threshold=1e6))
    assert pairs == [] and gated.teacher_calls == 0
    assert gated.decisions["gated_out"] == TURNS
    assert gated.calls_saved_by_gating == TURNS
    open_gate, pairs = replay([hf("local", read_teacher_dir)], scorer, ReplaySettings(entropy_threshold=0.0))
    assert open_gate.calls_saved_by_gating == 0 and len(pairs) == 4


def test_gating_between_the_extremes_asks_teachers_only_where_the_student_was_unsure(read_teacher_dir, scorer):
    entropy = {}
    for trace in recorded_traces():
        for step in turn_starts(trace):
            text = step.action.metadata.get(ASSISTANT_TEXT_KEY) or format_tool_call(step.action)
            messages = transcript(trace, before_step=step.index)
            entropy[(trace.episode_id, step.index)] = scorer.score(messages, text).mean_entropy
    ranked = sorted(entropy.values())
    split = next(i for i in range(len(ranked) // 2, len(ranked) - 1) if ranked[i] < ranked[i + 1])
    threshold = (ranked[split] + ranked[split + 1]) / 2
    unsure = {key for key, value in entropy.items() if value > threshold}
    assert 0 < len(unsure) < TURNS  # the threshold falls between turns, so the gate is neither shut nor open

    report, pairs = replay([hf("local", read_teacher_dir)], scorer, ReplaySettings(entropy_threshold=threshold))
    _, ungated_pairs = replay([hf("local", read_teacher_dir)], scorer)
    assert report.decisions["gated_out"] == report.calls_saved_by_gating == TURNS - len(unsure)
    assert report.teacher_calls == len(unsure)
    # the gate only removes turns: where it let the teachers speak, the decisions are the ungated ones
    assert {(p.trace_id, p.step_index) for p in pairs} == {(p.trace_id, p.step_index) for p in ungated_pairs} & unsure


def test_the_spending_cap_stops_the_run_cleanly_before_it_is_passed(openai_server, scorer):
    # each call reserves max_tokens * $1000/Mtok = $0.01 and really costs about a tenth of that,
    # so the first step fits and the second, started while the first is in flight, does not
    priced = served("served", openai_server, output_usd_per_mtok=1000.0, max_tokens=10)
    report, pairs = replay([priced], scorer, cap_usd=0.015)
    assert report.stopped_by_budget
    assert report.cost_usd <= 0.015
    assert report.decisions["budget_exhausted"] >= 1
    assert report.teachers["served"].calls == sum(report.decisions[k] for k in ("pair", "student_agrees"))
    assert len(pairs) == report.decisions["pair"] >= 1
    assert report.cost_usd == pytest.approx(sum(t.cost_usd for t in report.traces))
    assert report.cost_usd == pytest.approx(report.teachers["served"].cost_usd) and report.cost_usd > 0


def test_chosen_and_rejected_are_rendered_alike_whatever_the_student_wrote_around_its_call(read_teacher_dir, scorer):
    raw = (
        "Look first, then give up.\n"
        + format_tool_call(ToolCall(tool="list_dir"))
        + "\n"
        + format_tool_call(ToolCall(tool="submit"))
    )
    trace = recorded_traces()[0]
    for step in trace.steps:
        step.action.metadata[TURN_KEY] = 0
    trace.steps[0].action.metadata[ASSISTANT_TEXT_KEY] = raw
    assert [s.index for s in turn_starts(trace)] == [0]
    report, pairs = replay([hf("local", read_teacher_dir)], scorer, traces=[trace])
    assert report.decisions["pair"] == 1 and report.traces[0].decision_points == 1
    pair = pairs[0]
    assert pair.rejected.tool == "list_dir"
    # the pair is about the action: both sides are one canonical call, without the student's prose and second call
    assert pair.rejected_text == format_tool_call(pair.rejected) and pair.chosen_text == format_tool_call(pair.chosen)
    messages = pair.messages()
    assert pair.reference_rejected_logp == pytest.approx(scorer.score(messages, pair.rejected_text).logp, abs=1e-5)


def test_an_unparseable_turn_is_rejected_with_its_own_text(read_teacher_dir, scorer):
    trace = recorded_traces()[0]
    raw = "I will list the files now"
    metadata = {PARSE_ERROR_KEY: "no <tool_call> block in the reply", ASSISTANT_TEXT_KEY: raw}
    trace.steps[0].action = ToolCall(tool="", args={}, metadata=metadata)
    _, pairs = replay([hf("local", read_teacher_dir)], scorer, traces=[trace])
    assert pairs[0].rejected_text == raw


def test_regrow_replay_names_a_bad_teachers_file(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from regrow.cli import app

    traces = tmp_path / "traces.jsonl"
    traces.write_text("\n".join(t.model_dump_json() for t in recorded_traces()) + "\n")
    teachers = tmp_path / "teachers.yaml"
    teachers.write_text("teachers: []\n")
    result = CliRunner().invoke(
        app,
        [
            "replay",
            str(traces),
            "--teachers",
            str(teachers),
            "--out",
            str(tmp_path / "p.jsonl"),
            "--policy",
            str(tiny_model_dir),
        ],
    )
    assert result.exit_code == 1
    assert "is not a valid teachers file" in " ".join(result.output.split())
