"""A tiny random-init Qwen2 chat model with a byte-level BPE tokenizer trained here, saved to a folder."""

from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
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
    from trainer_client.chat_format import system_prompt

    return CORPUS + [system_prompt(tool_specs())]


def build_tiny_chat_model(folder: Path, whole_replies: tuple[str, ...] = (), seed: int = 0) -> Path:
    """Train a tokenizer on the corpus, make a random Qwen2 of ~100k parameters, save both to `folder`.

    Each of `whole_replies` becomes one added token, so that a teacher can learn it in a few steps.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1500, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(training_corpus() * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.add_tokens(list(whole_replies))
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
