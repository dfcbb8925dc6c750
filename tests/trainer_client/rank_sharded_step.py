"""Two optimizer steps of the tiny policy with all three channels, its weights sharded over the two gloo ranks
`torchrun` started by FSDP2 (`fully_shard` on each decoder layer, then the root, as accelerate's FSDP2 wraps a causal
LM), beside the same two steps of one unsharded copy on both ranks' batches, as one process would take them.

Rank 0's group has twelve hinted turns (two teacher forwards) and one DPO pair; rank 1's has no hinted turn and
three pairs, so the channels' own forwards differ in number between the ranks. accelerate shards nothing for a
CPU run, so the trainer's loss is called directly, with SGD written out (FSDP2 averages the ranks' gradients).
Rank r saves OUT/steps<r>.pt: after each step, the sharded weights gathered whole and the unsharded copy's.

`torchrun --standalone --nproc_per_node 2 -m tests.trainer_client.rank_sharded_step OUT [--teacher live|initial]`
"""

import copy
import itertools
import os
import sys

import torch
import torch.distributed as dist

from regrow.bench.sharded_training import sgd, sharded_like_accelerate, whole_weights
from regrow.bench.training import synthetic_pairs
from tests.trainer_client.conftest import play_scripts
from tests.trainer_client.scripted_env import serve_scripted_env
from tests.trainer_client.test_trainer_step import MALFORMED, RUN_LS, SUBMIT, WRITE, config
from tests.trainer_client.tiny_policy import tiny_qwen2, train_tokenizer
from trainer_client.rollout.chat_tokens import EpisodeTokenizer
from trainer_client.rollout.rows import EPISODE_SLOT, env_reward, episode_slots, trajectory_rows
from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

HINTED = [[MALFORMED, MALFORMED, MALFORMED, WRITE, SUBMIT], [MALFORMED, MALFORMED, MALFORMED, SUBMIT]] * 2
SOLVED = [[WRITE, SUBMIT], [WRITE, RUN_LS, SUBMIT]] * 2  # no feedback, so no hinted turn
GROUP = 4
PAIRS_OF_RANK = [slice(0, 1), slice(1, 4)]
LEARNING_RATE = 10.0
# SDPO's gradient on a random policy is 1e-5 of DPO's at equal weight; this weight makes it a few percent of the step.
ALPHA_SDPO = 1000.0
STEPS = 2


def main(out: str, teacher: str) -> None:
    tokenizer = train_tokenizer()
    tokens = EpisodeTokenizer(tokenizer)
    with serve_scripted_env(max_sessions=8) as url:
        trajectories = [play_scripts(url, tokenizer, tokens, scripts) for scripts in (HINTED, SOLVED)]
    model = tiny_qwen2(tokenizer).double()  # float32's rounding of the update is 5e-4 of it; float64's 1e-9
    pairs = synthetic_pairs(tokenizer, model, count=4, context_turns=1)
    if teacher == "initial":
        from trainer_client.policy.lora_adapter import with_lora

        model = with_lora(model, r=4, alpha=8, dropout=0.0, target_modules="all-linear")
    args = config(
        out, RegrowGRPOConfig, per_device_train_batch_size=GROUP, num_generations=GROUP,
        sdpo_teacher=teacher, alpha_sdpo=ALPHA_SDPO, beta_dpo=1.0, dpo_beta=0.5,
    )  # fmt: skip
    rank = int(os.environ["RANK"])
    trainer = RegrowGRPOTrainer(
        model=model,
        args=args,
        reward_funcs=env_reward,
        train_dataset=episode_slots(GROUP),
        processing_class=tokenizer,
        rollout_func=lambda prompts, _: trajectory_rows(trajectories[rank][: len(prompts)], tokens),
        pair_batches=itertools.repeat(pairs[PAIRS_OF_RANK[rank]]),
    )
    trainer.current_gradient_accumulation_steps = 1
    mine = trainer._generate_and_score_completions([{"prompt": EPISODE_SLOT} for _ in range(GROUP)])
    batches: list = [None] * dist.get_world_size()
    dist.all_gather_object(batches, mine)
    alone, sharded = copy.deepcopy(model).train(), sharded_like_accelerate(model).train()
    saved = []
    for _ in range(STEPS):
        for other, batch in enumerate(batches):  # one process, both ranks' batches: the mean of their gradients
            trainer.pair_batches = itertools.repeat(pairs[PAIRS_OF_RANK[other]])
            trainer._compute_loss(alone, batch).backward()
        sgd(alone, LEARNING_RATE, divide=len(batches))
        trainer.pair_batches = itertools.repeat(pairs[PAIRS_OF_RANK[rank]])
        trainer._compute_loss(sharded, mine).backward()
        sgd(sharded, LEARNING_RATE)
        saved.append({"sharded": whole_weights(sharded), "alone": whole_weights(alone)})
    saved.append({"start": whole_weights(model), "hinted_turns": trainer._metrics["train"]["sdpo/hinted_turns"]})
    torch.save(saved, f"{out}/steps{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[sys.argv.index("--teacher") + 1] if "--teacher" in sys.argv else "live")
