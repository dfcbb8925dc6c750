"""The two kinds of teacher: a real OpenAI-compatible server (`transformers serve`) and a local HF model."""

import asyncio

import pytest

from tests.replay.fault_proxy import FaultProxy, Faults
from tests.replay.tool_caller import READ_CORE, RUN_TESTS, replay_contexts
from trainer_client.replay.action_key import action_key
from trainer_client.replay.hf_teacher import HFTeacher
from trainer_client.replay.openai_teacher import OpenAITeacher
from trainer_client.replay.teacher_call import TeacherError, worst_case_cost_usd
from trainer_client.replay.teachers_config import HFTeacherConfig, OpenAITeacherConfig
from trainer_client.rollout.chat_format import parse_tool_calls

pytestmark = pytest.mark.train


def ask(teacher, messages):
    async def once():
        try:
            return await teacher.complete(messages)
        finally:
            await teacher.aclose()

    return asyncio.run(once())


def openai_config(base_url: str, model: str, **overrides) -> OpenAITeacherConfig:
    settings = dict(name="served", base_url=base_url, model=model, input_usd_per_mtok=2.0, output_usd_per_mtok=8.0)
    return OpenAITeacherConfig(**(settings | overrides))


def test_openai_teacher_gets_a_tool_call_and_its_price_from_a_real_server(openai_server):
    base_url, model = openai_server
    reply = ask(OpenAITeacher(openai_config(base_url, model)), replay_contexts()[0])
    call = parse_tool_calls(reply.text)[0]
    assert call.error is None
    assert action_key(call.call) == action_key(READ_CORE)
    assert reply.input_tokens > 100 and reply.output_tokens >= 1
    assert reply.cost_usd == pytest.approx((reply.input_tokens * 2.0 + reply.output_tokens * 8.0) / 1e6)
    assert reply.attempts == 1


def test_openai_teacher_without_usage_figures_is_costed_at_its_worst_case(openai_server):
    base_url, model = openai_server
    messages = replay_contexts()[0]
    counted = ask(OpenAITeacher(openai_config(base_url, model)), messages)
    with FaultProxy(base_url, Faults(drop_usage=True)) as proxy:
        bounded = ask(OpenAITeacher(openai_config(proxy.base_url, model)), messages)
    assert bounded.text == counted.text  # the same answer, only its token counts are missing
    assert bounded.cost_usd == pytest.approx(worst_case_cost_usd(openai_config(base_url, model), messages))
    assert bounded.cost_usd > counted.cost_usd > 0


def test_openai_teacher_retries_overload_with_backoff_and_then_answers(openai_server):
    base_url, model = openai_server
    with FaultProxy(base_url, Faults(fail_first=2, fail_status=503)) as proxy:
        teacher = OpenAITeacher(openai_config(proxy.base_url, model, max_retries=2))
        reply = ask(teacher, replay_contexts()[1])
    assert reply.attempts == 3
    assert proxy.requests == 3
    assert action_key(parse_tool_calls(reply.text)[0].call) == action_key(READ_CORE)


def test_openai_teacher_gives_up_after_its_retries(openai_server):
    base_url, model = openai_server
    with FaultProxy(base_url, Faults(fail_first=10, fail_status=429)) as proxy:
        teacher = OpenAITeacher(openai_config(proxy.base_url, model, max_retries=2))
        with pytest.raises(TeacherError) as failure:
            ask(teacher, replay_contexts()[0])
    assert failure.value.kind == "http_429"
    assert proxy.requests == 3


def test_openai_teacher_does_not_retry_a_client_error(openai_server):
    base_url, model = openai_server
    with FaultProxy(base_url, Faults(fail_first=1, fail_status=400)) as proxy:
        teacher = OpenAITeacher(openai_config(proxy.base_url, model, max_retries=3))
        with pytest.raises(TeacherError, match="HTTP 400") as failure:
            ask(teacher, replay_contexts()[0])
    assert failure.value.kind == "http_400"
    assert proxy.requests == 1


def test_openai_teacher_times_out_each_attempt_of_a_stalled_server(openai_server):
    base_url, model = openai_server
    with FaultProxy(base_url, Faults(stall_s=3.0)) as proxy:
        teacher = OpenAITeacher(openai_config(proxy.base_url, model, timeout_s=0.3, max_retries=1))
        with pytest.raises(TeacherError, match="no answer within 0.3s") as failure:
            ask(teacher, replay_contexts()[0])
    assert failure.value.kind == "timeout"
    assert proxy.requests == 2


def test_openai_teacher_sends_the_key_from_the_named_variable(openai_server, monkeypatch):
    base_url, model = openai_server
    monkeypatch.setenv("REPLAY_TEST_KEY", "sk-local-test")
    with FaultProxy(base_url, Faults()) as proxy:
        ask(OpenAITeacher(openai_config(proxy.base_url, model, api_key_env="REPLAY_TEST_KEY")), replay_contexts()[0])
    assert proxy.authorization == "Bearer sk-local-test"


def test_openai_teacher_without_a_key_variable_never_sends_openai_api_key(openai_server, monkeypatch):
    base_url, model = openai_server
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient-secret")  # the SDK's own default, not this teacher's key
    with FaultProxy(base_url, Faults()) as proxy:
        ask(OpenAITeacher(openai_config(proxy.base_url, model)), replay_contexts()[0])
    assert "sk-ambient-secret" not in (proxy.authorization or "")


def test_openai_teacher_names_a_missing_key_variable(monkeypatch):
    monkeypatch.delenv("REPLAY_TEST_MISSING_KEY", raising=False)
    with pytest.raises(ValueError, match="REPLAY_TEST_MISSING_KEY is empty"):
        OpenAITeacher(openai_config("http://127.0.0.1:9/v1", "m", api_key_env="REPLAY_TEST_MISSING_KEY"))


def test_openai_teacher_reports_an_unreachable_server_as_a_connection_error():
    teacher = OpenAITeacher(openai_config("http://127.0.0.1:9/v1", "m", max_retries=1))
    with pytest.raises(TeacherError, match="unreachable") as failure:
        ask(teacher, replay_contexts()[0])
    assert failure.value.kind == "connection"


def test_hf_teacher_answers_greedily_with_its_learned_tool_call(read_teacher_dir, run_teacher_dir):
    config = HFTeacherConfig(name="local", path=read_teacher_dir, input_usd_per_mtok=1.0)
    reply = ask(HFTeacher(config), replay_contexts()[2])
    assert action_key(parse_tool_calls(reply.text)[0].call) == action_key(READ_CORE)
    assert reply.cost_usd == pytest.approx(reply.input_tokens / 1e6)
    other = ask(HFTeacher(HFTeacherConfig(name="other", path=run_teacher_dir)), replay_contexts()[2])
    assert action_key(parse_tool_calls(other.text)[0].call) == action_key(RUN_TESTS)


def test_hf_teacher_times_out_when_generation_outlasts_its_deadline(tiny_model_dir):
    # the untrained policy never closes its turn, so it runs into the deadline
    config = HFTeacherConfig(name="slow", path=tiny_model_dir, timeout_s=0.05, max_tokens=100_000)
    with pytest.raises(TeacherError, match="no complete answer within 0.05s") as failure:
        ask(HFTeacher(config), replay_contexts()[0])
    assert failure.value.kind == "timeout"


def test_hf_teacher_refuses_a_missing_model_folder(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        HFTeacher(HFTeacherConfig(name="gone", path=tmp_path / "nothing"))
