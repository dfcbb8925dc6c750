"""The optional problem-statement rewrite: a real OpenAI-compatible server rewrites; any failure keeps the template."""

import pytest

from task_synth.settings import SynthSettings
from task_synth.store.problem_rewrite import rewrite_problem_statement

TEMPLATE = (
    "The function `clamp` in `calc/ops.py` is not implemented.\nImplement it so that the test suite passes again.\n"
)


@pytest.fixture(scope="module")
def random_model_endpoint(train_extra, tmp_path_factory):
    """`transformers serve` on an untrained tiny model: its greedy answer is special tokens only, so empty text."""
    from tests.openai_serve import transformers_serve
    from tests.replay.tiny_model import build_tiny_chat_model

    folder = build_tiny_chat_model(tmp_path_factory.mktemp("rewriter"))
    with transformers_serve(folder, tmp_path_factory.mktemp("serve") / "serve.log") as base:
        yield f"{base}/v1", str(folder)


def test_rewrite_is_off_by_default():
    assert rewrite_problem_statement(TEMPLATE, SynthSettings()) == TEMPLATE


@pytest.mark.train
def test_empty_answer_from_a_real_endpoint_keeps_the_template(random_model_endpoint, caplog):
    base_url, model = random_model_endpoint
    settings = SynthSettings(rewrite_base_url=base_url, rewrite_model=model, rewrite_max_tokens=24)
    assert rewrite_problem_statement(TEMPLATE, settings) == TEMPLATE
    assert "came back empty" in caplog.text


def test_unreachable_endpoint_keeps_the_template(caplog):
    settings = SynthSettings(rewrite_base_url="http://127.0.0.1:9/v1", rewrite_model="any", rewrite_timeout_s=2)
    assert rewrite_problem_statement(TEMPLATE, settings) == TEMPLATE
    assert "keeping the template" in caplog.text
