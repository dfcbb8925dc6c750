"""A tiny random-init Qwen2 chat model with a byte-level BPE tokenizer trained here, saved to a folder."""

from pathlib import Path

from tests.tiny_chat_model import random_qwen2, train_chatml_tokenizer

CORPUS = [
    "Fix the failing test in mathlib. The function add should return the sum of its arguments.",
    '{"name": "read_file", "arguments": {"path": "mathlib/core.py"}}',
    '{"name": "run", "arguments": {"command": "python -m pytest -q"}}',
    '{"name": "edit_file", "arguments": {"path": "mathlib/core.py", "old": "return 0", "new": "return a + b"}}',
    '{"name": "search", "arguments": {"pattern": "def add", "path": "mathlib"}}',
    '{"name": "list_dir", "arguments": {}} {"name": "submit", "arguments": {}}',
    "system user assistant tool You are a coding agent. Call one tool per turn.",
    "exit code 1 FAILED tests/test_core.py::test_add - assert 0 == 3 passed failed",
]


def training_corpus() -> list[str]:
    """CORPUS plus the agent's real system prompt, so that the long tool schemas become few tokens."""
    from proto.actions import tool_specs
    from proto.transcript import system_prompt

    return CORPUS + [system_prompt(tool_specs())]


def build_tiny_chat_model(folder: Path, whole_replies: tuple[str, ...] = (), seed: int = 0) -> Path:
    """Train a tokenizer on the corpus, make a random Qwen2 of ~100k parameters, save both to `folder`.

    Each of `whole_replies` becomes one added token, so that a teacher can learn it in a few steps.
    """
    tokenizer = train_chatml_tokenizer(training_corpus() * 4, vocab_size=1500)
    tokenizer.add_tokens(list(whole_replies))
    model = random_qwen2(
        tokenizer, hidden_size=32, intermediate_size=64, max_positions=4096, tie_embeddings=True, seed=seed
    )
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
