"""Tiny chat models built offline: a byte-level BPE tokenizer trained here with a ChatML template, and a random
Qwen2."""

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_chatml_tokenizer(corpus: list[str], vocab_size: int, across_words: bool = False):
    """A PreTrainedTokenizerFast trained on `corpus`: EOS `<|im_end|>`, pad `<|endoftext|>`, no BOS. With
    `across_words`, merges span spaces and punctuation, so a text seen often becomes a few tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not across_words)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    tokenizer.chat_template = CHATML
    return tokenizer


def random_qwen2(
    tokenizer, hidden_size: int, intermediate_size: int, max_positions: int, tie_embeddings: bool, seed: int = 0
):
    """A 2-layer Qwen2 with random weights sized for `tokenizer`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_embeddings,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    return Qwen2ForCausalLM(config)


def tool_calling_template() -> str:
    """The Qwen2.5 chat template as the pinned TRL ships it: TRL recognises it and parses `<tool_call>` blocks."""
    from importlib.resources import files

    return (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()


def teach_completions(model, tokenizer, prompt_ids: list[int], completions: list[str], steps: int, seed: int = 0):
    """Fit `model` to answer `prompt_ids` with each of `completions` alike (the loss on the completion tokens only),
    so that sampling draws each about equally often."""
    import torch

    torch.manual_seed(seed)
    rows = [prompt_ids + tokenizer.encode(text, add_special_tokens=False) for text in completions]
    width = max(map(len, rows))
    ids = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows])
    labels = ids.clone()
    labels[:, : len(prompt_ids)] = -100
    for index, row in enumerate(rows):
        labels[index, len(row) :] = -100
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return float(loss.detach())
