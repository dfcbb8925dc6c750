"""Fixtures of the replay tests: the tiny chat model, built once per session."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Folder holding a random-init tiny Qwen2 and its freshly trained tokenizer."""
    pytest.importorskip("torch")
    from tests.replay.tiny_model import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("tiny-chat-model"))
