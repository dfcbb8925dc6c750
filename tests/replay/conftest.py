"""Fixtures of the replay tests: the tiny policy, two tiny teachers, and a real OpenAI-compatible server."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(train_extra, tmp_path_factory) -> Path:
    """The policy: a random-init tiny Qwen2 and its freshly trained tokenizer."""
    from tests.replay.tiny_model import build_tiny_chat_model
    from tests.replay.tool_caller import WHOLE_REPLIES

    return build_tiny_chat_model(tmp_path_factory.mktemp("tiny-policy"), whole_replies=WHOLE_REPLIES)


@pytest.fixture(scope="session")
def read_teacher_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A tiny teacher that always answers read_file(mathlib/core.py)."""
    from proto.transcript import format_tool_call
    from tests.replay.tool_caller import READ_CORE, train_tool_caller

    return train_tool_caller(tiny_model_dir, tmp_path_factory.mktemp("read-teacher"), format_tool_call(READ_CORE))


@pytest.fixture(scope="session")
def run_teacher_dir(read_teacher_dir, tmp_path_factory) -> Path:
    """A tiny teacher that always answers run(python -m pytest -q)."""
    from proto.transcript import format_tool_call
    from tests.replay.tool_caller import READ_CORE, RUN_TESTS, relabel_reply

    return relabel_reply(
        read_teacher_dir,
        tmp_path_factory.mktemp("run-teacher"),
        format_tool_call(READ_CORE),
        format_tool_call(RUN_TESTS),
    )


@pytest.fixture(scope="session")
def openai_server(read_teacher_dir, tmp_path_factory):
    """`transformers serve` on the read teacher: a real OpenAI-compatible endpoint on loopback."""
    from tests.openai_serve import transformers_serve

    with transformers_serve(read_teacher_dir, tmp_path_factory.mktemp("serve") / "serve.log") as base:
        yield f"{base}/v1", str(read_teacher_dir)
