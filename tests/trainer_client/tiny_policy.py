"""The trainer tests' tiny policy: a random-init Qwen2 and a 600-token tokenizer trained on agent-like text."""

from pathlib import Path

from tests.tiny_chat_model import random_qwen2, train_chatml_tokenizer

TEXTS = [
    "You are a software engineer working in a repository at /workspace. Fix the task by calling tools.",
    '<tool_call>\n{"name": "run", "arguments": {"command": "python -m pytest -q"}}\n</tool_call>',
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "calc/ops.py"}}\n</tool_call>',
    '<tool_call>\n{"name": "write_file", "arguments": {"path": "calc/ops.py", "content": "def clamp(v, lo, hi):"}}\n',
    "<tool_response>\nran it\n[exit code: 0]\n</tool_response> Feedback on your last action: unknown tool",
    "def clamp(value, low, high):\n    return max(low, min(value, high))\n FAILED passed submit list_dir",
]


def train_tokenizer():
    return train_chatml_tokenizer(TEXTS * 8, vocab_size=600)


def tiny_qwen2(tokenizer, seed: int = 0):
    return random_qwen2(
        tokenizer, hidden_size=48, intermediate_size=96, max_positions=8192, tie_embeddings=False, seed=seed
    )


def save_tiny_policy(folder: Path) -> Path:
    """The tiny policy and its tokenizer in a save_pretrained folder, as `regrow train --model` takes it."""
    tokenizer = train_tokenizer()
    tiny_qwen2(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_run_settings(env, model: Path, output_dir: Path, task_id: str, **overrides):
    """`regrow train`'s settings for a short CPU run of the tiny policy: two workers, groups of two, one group a
    step, short turns; `overrides` set the rest (steps, channels, limits). A random tiny policy's groups are mostly
    all 0, so they are kept: dropping them would only play more episodes."""
    from trainer_client.train.settings import TrainSettings

    fields = dict(
        env=env,
        uniform_groups="keep",
        model=str(model),
        output_dir=output_dir,
        task_ids=[task_id],
        group_size=2,
        groups_per_step=1,
        workers=2,
        device="cpu",
        logger="none",
    )
    return TrainSettings(**{**fields, **overrides})
