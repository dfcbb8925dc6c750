"""`regrow ladder --recipe NAME`: the settings of a ladder sized for one kind of machine, and what it will cost.

A recipe sets the training and evaluation options a user did not give (a flag or a REGROW_ variable always wins),
names the model shape it was sized for, and reckons the hours: the arms (four, or those it names) times the seeds,
each arm its training steps and its evaluation episodes. The per-step and per-episode times are estimates, written
beside each recipe with what they assume; `regrow bench gpu` (the trainer's step) and `regrow bench rollouts` (episodes
a minute) measure them on the machine itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ARM_COUNT = 4
# The longest turn of `regrow traces demo`'s demonstrations on the demo store, in SmolLM2's tokens: an edit_file call
# that rewrites a stubbed function whole. A turn budget below it cuts the demonstration the policy was fine-tuned on.
DEMO_LONGEST_TURN_TOKENS = 672
# The same on the store of single-function demo tasks that cpu-overfit trains on (`--kinds function --max-tasks 10`):
# render_table's edit.
FUNCTION_DEMO_LONGEST_TURN_TOKENS = 308


@dataclass(frozen=True)
class LadderRecipe:
    """A ladder sized for one machine: its settings, the model it was sized for, and its time estimates."""

    name: str
    machine: str
    model_shape: str  # a shipped shape (trainer_client/train/model_shapes) or 'smollm2'; --model gives the weights
    train: dict[str, Any]
    ladder: dict[str, Any]
    step_s: float  # one optimizer step, its rollouts included
    eval_episode_s: float  # one evaluation episode, at the recipe's concurrency
    assumes: str
    launch: str = ""  # how to start it, when not a plain `regrow ladder`

    def hours(self, steps: int, seeds: int, eval_episodes: int, arms: int = ARM_COUNT) -> float:
        """Wall hours of the whole ladder: every arm and seed trains `steps` steps and plays `eval_episodes`."""
        return arms * seeds * (steps * self.step_s + eval_episodes * self.eval_episode_s) / 3600


RECIPES = {
    recipe.name: recipe
    for recipe in (
        LadderRecipe(
            name="cpu-demo",
            machine="a 2-core CPU box, the env server beside it",
            model_shape="smollm2",
            train={
                "steps": 1,
                "group_size": 2,
                "groups_per_step": 1,
                "workers": 2,
                "max_turns": 5,
                "max_turn_tokens": DEMO_LONGEST_TURN_TOKENS + 96,
                # a file read alone is hundreds of tokens: the demonstrator's episodes need 975 to 2,119
                "max_completion_tokens": 2560,
                "temperature": 0.3,
                "device": "cpu",
            },
            ladder={"seeds": 3, "eval_tasks": 4, "k": 1},
            step_s=153.0,
            eval_episode_s=59.0,
            assumes="SmolLM2-135M (or an SFT checkpoint of it) on 2 cores with nothing else running, as measured on "
            "this machine: 153 s a step of 2 episodes, their sampling included, and 59 s an evaluation episode (the "
            "means of a whole 3-seed ladder from an SFT checkpoint, which took 78 minutes); the step is one, as one "
            "more costs about 2.5 minutes an arm and seed",
        ),
        LadderRecipe(
            name="cpu-overfit",
            machine="a 2-core CPU box, the env server beside it serving a store of single-function demo tasks",
            model_shape="smollm2",
            train={
                "steps": 6,
                # one task a step, 4 episodes of it: with --task-ids of 3 tasks, each half of the steps plays every
                # task once, so the first half's mean reward and the last's compare
                "group_size": 4,
                "groups_per_step": 1,
                "workers": 4,  # the group's episodes in flight together: the sampler batches their turns
                "split": "train",
                "max_turns": 5,  # the demonstrations' calls: a read, an edit, the tests, submit
                "max_turn_tokens": FUNCTION_DEMO_LONGEST_TURN_TOKENS + 76,
                "max_completion_tokens": 2048,  # the demonstrations' episodes take 1,106 to 1,162 after the prompt
                "micro_batch_rows": 1,
                # at 0.7 the fine-tuned policy (assistant loss 0.015) passes some of each task's episodes and not
                # others: groups whose rewards differ, the only ones GRPO learns from
                "temperature": 0.7,
                # at 3e-5 (decaying) the policy lost its edits within 3 steps; 5e-6 decaying to 0 moved nothing in 6
                "learning_rate": 1e-5,
                "lr_schedule": "constant",
                # every group counts in the step's mean reward, the curve's one number; a step whose group scored
                # alike has no gradient, and the optimizer leaves the weights alone (silent_steps.py)
                "uniform_groups": "keep",
                # the stream plays up to 2 groups ahead of the trainer (2 a step's groups); a group dropped as stale
                # shifts the task cycle, and the halves of the steps then play different tasks
                "max_staleness": 2,
                "save_steps": 1000,
                "device": "cpu",
            },
            ladder={"arms": ["a1"], "seeds": 3, "eval_tasks": 0, "k": 1},
            step_s=165.0,
            eval_episode_s=0.0,
            assumes="an SFT checkpoint of SmolLM2-135M on the store's own 10 demonstrations (--model: 6 epochs at "
            "1e-4 take their assistant loss from 1.43 to 0.005, 21 minutes) on 2 cores with nothing else running: a "
            "step of 4 episodes of one single-function task, in flight together, and its update (165 s measured); "
            "read each seed's first half of the steps against its last in the table's training reward",
            launch="regrow synth tests/fixtures/minilib --out TASKS --kinds function --max-tasks 10 --seed 0; regrow "
            "serve --tasks TASKS; regrow traces demo --tasks TASKS --env URL; regrow traces export --db "
            "TASKS/traces.sqlite --out demos.jsonl; regrow sft --traces demos.jsonl --model smollm2 --epochs 6 "
            "--learning-rate 1e-4 --output-dir runs/sft; regrow bench rollouts --env URL --model runs/sft/final "
            "--group-size 4 --episodes 40 --workers 8 --max-turns 5 --max-turn-tokens 384 --temperature 0.7 "
            "--task-id ID (each); then regrow ladder --recipe cpu-overfit --model runs/sft/final --env URL --out "
            "runs/overfit --task-ids ID1,ID2,ID3 (the 3 whose pass rate is nearest one half)",
        ),
        LadderRecipe(
            name="gpu-1x80gb",
            machine="one 80 GB GPU (H100 or A100), the env server on another host",
            model_shape="qwen2.5-0.5b",
            train={
                "steps": 100,
                "group_size": 8,
                "groups_per_step": 4,
                "workers": 16,
                "max_turns": 12,
                "max_turn_tokens": 384,
                "max_completion_tokens": 4096,
                "device": "cuda",
                "bf16": True,
            },
            ladder={"seeds": 3, "eval_tasks": 32, "k": 4},
            step_s=90.0,
            eval_episode_s=6.0,
            assumes="HF sampling at about 1,500 tokens/s over 16 workers and a trainer step of about 10 s for 32 "
            "episodes of up to 4,400 tokens; measure both with `regrow bench rollouts` and `regrow bench gpu`",
        ),
        LadderRecipe(
            name="gpu-node-8x80gb",
            machine="one node of 8 80 GB GPUs: 7 train under accelerate (FSDP), 1 serves vLLM",
            model_shape="qwen2.5-1.5b",
            train={
                "steps": 200,
                "group_size": 8,
                "groups_per_step": 14,
                "workers": 64,
                "max_turns": 16,
                "max_turn_tokens": 512,
                "max_completion_tokens": 8192,
                "bf16": True,
                "plan_gpus": 7,  # what --plan holds each GPU to: the 7 that train, under FSDP
                "plan_sharding": "fsdp",
            },
            ladder={"seeds": 3, "eval_tasks": 64, "k": 4},
            step_s=153.0,
            eval_episode_s=2.0,
            assumes="vLLM sampling at about 20,000 tokens/s and 64 concurrent sandboxes on the env servers; a "
            "trainer step of about 30 s for 112 episodes over 7 GPUs",
            launch="CUDA_VISIBLE_DEVICES=7 trl vllm-serve --model MODEL --port 8100 &  then  "
            "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6 accelerate launch --num_processes 7 --config_file "
            "deploy/accelerate/fsdp.yaml -m regrow ladder --recipe gpu-node-8x80gb --model MODEL "
            "--vllm-server http://127.0.0.1:8100 --env ... --out runs/ladder",
        ),
    )
}


def recipe_named(name: str) -> LadderRecipe:
    if name not in RECIPES:
        raise ValueError(f"--recipe {name!r}: no such recipe; the recipes are {', '.join(RECIPES)}")
    return RECIPES[name]


def with_recipe(recipe: LadderRecipe, train: Any, ladder: Any) -> tuple[Any, Any]:
    """`train` and `ladder` settings with the recipe's values for every field neither a flag nor a variable set;
    ValueError when a recipe sized for other weights than the demo policy's is given no --model."""
    if recipe.model_shape != "smollm2" and "model" not in train.model_fields_set:
        raise ValueError(
            f"--recipe {recipe.name} is sized for {recipe.model_shape}: give --model, a folder with such a model's "
            "weights saved with save_pretrained (nothing is downloaded)"
        )
    unset_train = {k: v for k, v in recipe.train.items() if k not in train.model_fields_set}
    unset_ladder = {k: v for k, v in recipe.ladder.items() if k not in ladder.model_fields_set}
    return train.model_copy(update=unset_train), ladder.model_copy(update=unset_ladder)


def recipe_summary(recipe: LadderRecipe, train: Any, ladder: Any) -> str:
    """What a person needs before committing a machine to the ladder: its shape, its size and its hours."""
    episodes = ladder.eval_tasks * ladder.k
    arms = len(ladder.arms)
    hours = recipe.hours(train.steps, ladder.seeds, episodes, arms)
    return (
        f"recipe {recipe.name} ({recipe.machine}): sized for {recipe.model_shape}; {arms} arm{'s' * (arms != 1)} x "
        f"{ladder.seeds} seeds, each {train.steps} steps of {train.groups_per_step} groups of {train.group_size} and "
        f"{episodes} evaluation episodes: about {hours:.1f} hours, assuming {recipe.assumes}"
    )
