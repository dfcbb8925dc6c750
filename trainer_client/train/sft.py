"""`regrow sft`: a warm start for RL. TRL's SFTTrainer fine-tunes the policy on exported episodes (`regrow traces
export`, of `regrow traces demo`'s demonstrations or any agent's) that earned at least `--min-reward`. Each episode is
rendered by the policy's own chat template exactly as `regrow train` renders it, and only the assistant's tokens are
trained on, so the first RL step starts from a policy that already writes the env's tool calls.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

logger = logging.getLogger(__name__)


class SftSettings(BaseSettings):
    """What `regrow sft` trains, on what, and how."""

    model_config = SettingsConfigDict(env_prefix="REGROW_SFT_", cli_kebab_case=True, extra="forbid")

    traces: Path = Field(description="Episodes exported by `regrow traces export` (a .jsonl or .parquet file).")
    model: str = Field(default="smollm2", description="Policy: a save_pretrained folder, a .gguf file, or 'smollm2'.")
    output_dir: Path = Field(default=Path("runs/regrow-sft"), description="Checkpoints; the model goes to final/.")
    min_reward: float = Field(default=1.0, description="Keep the episodes that earned at least this reward.")
    epochs: float = Field(default=3.0, gt=0, description="Passes over the kept episodes.")
    learning_rate: float = Field(default=1e-5, gt=0, description="Optimizer learning rate.")
    batch_size: int = Field(default=1, ge=1, description="Episodes per optimizer step.")
    max_length: int = Field(
        default=8192, ge=16, description="Episodes longer than this many tokens are left out (and counted), never cut."
    )
    device: str = Field(default="auto", description="auto (CUDA when there is one), cuda or cpu.")
    seed: int = Field(default=0, description="Seeds the data order and the trainer.")


@dataclass
class SftSummary:
    """What a fine-tuning run kept, left out, and made."""

    kept: int
    below_reward: int
    too_long: int
    loss_before: float
    loss_after: float
    final_model: Path


def read_exported(path: Path) -> list[dict[str, Any]]:
    """The rows of an export, JSONL or Parquet, each with its `messages` and `reward`."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not a file: make one with `regrow traces export --out {path}`")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path, columns=["messages", "reward"]).to_pylist()
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if rows and "messages" not in rows[0]:
        raise ValueError(f"{path} has no `messages` column: is it an export of `regrow traces export`?")
    return rows


def sft_examples(rows: list[dict[str, Any]], episode_tokens: Any, settings: SftSettings) -> tuple[list[dict], int, int]:
    """(examples with `input_ids` and `assistant_masks`, episodes below the reward, episodes too long)."""
    examples, below, too_long = [], 0, 0
    for row in rows:
        if row.get("reward") is None or row["reward"] < settings.min_reward:
            below += 1
            continue
        ids, mask = episode_tokens.assistant_masked(
            [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
        )
        if len(ids) > settings.max_length:
            too_long += 1
            continue
        examples.append({"input_ids": ids, "assistant_masks": mask})
    return examples, below, too_long


def assistant_loss(model: Any, examples: list[dict]) -> float:
    """The mean cross-entropy of the assistant's tokens over `examples`, one episode at a time."""
    import torch

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for example in examples:
            ids = torch.tensor([example["input_ids"]], device=model.device)
            labels = ids.clone()
            labels[0, torch.tensor(example["assistant_masks"], device=model.device) == 0] = -100
            tokens = int((labels[0, 1:] != -100).sum())
            total += float(model(input_ids=ids, labels=labels).loss) * tokens
            count += tokens
    return total / max(count, 1)


def run_sft(settings: SftSettings) -> SftSummary:
    """Fine-tune the policy on the kept episodes and save it to OUTPUT_DIR/final."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from trainer_client.policy.policy_loading import load_policy
    from trainer_client.rollout.chat_tokens import EpisodeTokenizer

    rows = read_exported(settings.traces)
    device = settings.device if settings.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    model, tokenizer = load_policy(settings.model, device=device)
    examples, below, too_long = sft_examples(rows, EpisodeTokenizer(tokenizer), settings)
    if not examples:
        raise ValueError(
            f"none of the {len(rows)} episodes in {settings.traces} earned {settings.min_reward} and fits "
            f"{settings.max_length} tokens ({below} below the reward, {too_long} too long): lower --min-reward, "
            "raise --max-length, or play demonstrations with `regrow traces demo`"
        )
    if too_long:
        logger.warning("%d episodes are longer than --max-length %d and are left out", too_long, settings.max_length)
    before = assistant_loss(model, examples)
    config = SFTConfig(
        output_dir=str(settings.output_dir),
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        max_length=settings.max_length,
        bf16=device == "cuda" and torch.cuda.is_bf16_supported(),
        use_cpu=device == "cpu",
        seed=settings.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
    )
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=Dataset.from_list(examples), processing_class=tokenizer
    )
    trainer.train()
    final = settings.output_dir / "final"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    after = assistant_loss(model, examples)
    logger.info("assistant loss on the %d kept episodes: %.4f -> %.4f", len(examples), before, after)
    return SftSummary(len(examples), below, too_long, before, after, final)
