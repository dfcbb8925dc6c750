"""A tiny random-init Qwen2 policy and a byte-level BPE tokenizer trained here, with a ChatML template."""

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEXTS = [
    "You are a software engineer working in a repository at /workspace. Fix the task by calling tools.",
    '<tool_call>\n{"name": "run", "arguments": {"command": "python -m pytest -q"}}\n</tool_call>',
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "calc/ops.py"}}\n</tool_call>',
    '<tool_call>\n{"name": "write_file", "arguments": {"path": "calc/ops.py", "content": "def clamp(v, lo, hi):"}}\n',
    '<tool_response>\nran it\n[exit code: 0]\n</tool_response> Feedback on your last action: unknown tool',
    "def clamp(value, low, high):\n    return max(low, min(value, high))\n FAILED passed submit list_dir",
]


def train_tokenizer():
    """A PreTrainedTokenizerFast over a 600-token byte-level BPE, EOS `<|im_end|>`, pad `<|endoftext|>`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(TEXTS * 8, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    return tokenizer


def tiny_qwen2(tokenizer, seed: int = 0):
    """A 2-layer Qwen2 with random weights sized for `tokenizer`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen2ForCausalLM(config)
