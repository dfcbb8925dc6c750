"""One optimizer step of the tiny policy with all three channels on a fixed batch of two groups: alone, or split
over the ranks `torchrun` started (each rank trains on its group and its share of the pairs). Each rank saves its
parameters after the step to OUT/params<rank>.pt.

`python -m tests.trainer_client.rank_step OUT [--swap]`; --swap puts the second group first (one process only)."""

import os
import sys

import torch

from regrow.bench.training import synthetic_pairs
from tests.trainer_client.conftest import play_scripts
from tests.trainer_client.scripted_env import serve_scripted_env
from tests.trainer_client.test_trainer_step import MALFORMED, RUN_LS, SUBMIT, WRITE, config
from tests.trainer_client.tiny_policy import tiny_qwen2, train_tokenizer
from trainer_client.channels.preference_pairs import PairBatches
from trainer_client.rollout.chat_tokens import EpisodeTokenizer
from trainer_client.rollout.rows import env_reward, episode_slots, trajectory_rows
from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

# Two groups of four; the first group draws more feedback than the second, so the ranks distil unequal token counts.
SCRIPTS = [
    [MALFORMED, WRITE, SUBMIT],
    [MALFORMED, MALFORMED, SUBMIT],
    [WRITE, RUN_LS, SUBMIT],
    [MALFORMED, SUBMIT],
    [RUN_LS, SUBMIT],
    [WRITE, SUBMIT],
    [MALFORMED, WRITE, SUBMIT],
    [RUN_LS, RUN_LS, SUBMIT],
]
GROUP = 4
PAIRS = 4
# SGD with a step this large moves every weight far past float32's rounding of its value.
LEARNING_RATE = 1000.0


def main(out: str) -> None:
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    tokenizer = train_tokenizer()
    tokens = EpisodeTokenizer(tokenizer)
    with serve_scripted_env(max_sessions=8) as url:
        trajectories = play_scripts(url, tokenizer, tokens, SCRIPTS)
    rows = len(SCRIPTS) // world
    mine = trajectories[rank * rows : (rank + 1) * rows]
    if "--swap" in sys.argv:
        mine = mine[GROUP:] + mine[:GROUP]
    model = tiny_qwen2(tokenizer)
    pairs = synthetic_pairs(tokenizer, model, count=PAIRS, context_turns=1)
    args = config(
        out,
        RegrowGRPOConfig,
        per_device_train_batch_size=rows,
        num_generations=GROUP,
        optim="sgd",
        learning_rate=LEARNING_RATE,
        alpha_sdpo=1.0,
        sdpo_teacher="initial",
        beta_dpo=1.0,
        dpo_beta=0.5,
    )
    trainer = RegrowGRPOTrainer(
        model=model,
        args=args,
        reward_funcs=env_reward,
        train_dataset=episode_slots(rows),
        processing_class=tokenizer,
        rollout_func=lambda prompts, _: trajectory_rows(mine[: len(prompts)], tokens),
        pair_batches=PairBatches(pairs, PAIRS, rank=rank, world=world),
    )
    trainer.train()
    policy = trainer.accelerator.unwrap_model(trainer.model)
    torch.save({name: p.detach().clone() for name, p in policy.named_parameters()}, f"{out}/params{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
