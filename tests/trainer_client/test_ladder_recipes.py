"""`regrow ladder --recipe`: a ladder sized for one machine fills what the user left out, and says its hours first."""

import pytest
from typer.testing import CliRunner

from regrow.cli import app
from trainer_client.train.ladder import LadderSettings
from trainer_client.train.ladder_recipes import (
    DEMO_LONGEST_TURN_TOKENS,
    FUNCTION_DEMO_LONGEST_TURN_TOKENS,
    RECIPES,
    recipe_named,
    recipe_summary,
    with_recipe,
)
from trainer_client.train.settings import TrainSettings


def test_a_recipe_sets_what_was_not_given_and_a_given_option_wins(tmp_path):
    train = TrainSettings(env=["http://127.0.0.1:9"], output_dir=tmp_path, steps=7)
    ladder = LadderSettings(out=tmp_path, recipe="cpu-demo", k=5)

    train, ladder = with_recipe(recipe_named("cpu-demo"), train, ladder)

    assert train.steps == 7 and ladder.k == 5  # given: kept
    assert (train.group_size, train.groups_per_step, train.max_turns, train.device) == (2, 1, 5, "cpu")
    assert (ladder.seeds, ladder.eval_tasks) == (3, 4)
    # room for an episode like the demonstrator's (975 to 2,119 tokens after the prompt on the demo tasks)
    assert train.max_completion_tokens >= 2200


def test_the_hours_are_four_arms_times_the_seeds_each_its_steps_and_evaluation():
    recipe = RECIPES["cpu-demo"]

    assert recipe.hours(steps=1, seeds=3, eval_episodes=4) == pytest.approx(4 * 3 * (153 + 4 * 59) / 3600)


def test_every_recipe_names_options_the_settings_have_and_a_shape_the_plan_knows():
    from trainer_client.train.memory_plan import shape_of

    for recipe in RECIPES.values():
        assert set(recipe.train) <= set(TrainSettings.model_fields), recipe.name
        assert set(recipe.ladder) <= set(LadderSettings.model_fields), recipe.name
        assert shape_of(recipe.model_shape).parameters > 0
        TrainSettings(env=["http://127.0.0.1:9"], **recipe.train)  # within the settings' bounds


def test_a_gpu_recipe_without_model_weights_and_an_unknown_recipe_are_refused_with_what_to_give(tmp_path):
    train = TrainSettings(env=["http://127.0.0.1:9"], output_dir=tmp_path)
    with pytest.raises(ValueError, match="give --model"):
        with_recipe(recipe_named("gpu-1x80gb"), train, LadderSettings(out=tmp_path))
    with pytest.raises(ValueError, match="the recipes are cpu-demo, cpu-overfit, gpu-1x80gb, gpu-node-8x80gb"):
        recipe_named("tpu-pod")


def test_regrow_ladder_with_a_recipe_says_its_size_and_hours_before_it_checks_the_env(tmp_path):
    result = CliRunner().invoke(
        app, ["ladder", "--recipe", "cpu-demo", "--env", "http://127.0.0.1:9", "--out", str(tmp_path / "ladder")]
    )

    assert result.exit_code == 1  # nothing serves on port 9: the preflight stops it
    expected = recipe_summary(
        RECIPES["cpu-demo"], TrainSettings(env=["http://127.0.0.1:9"], steps=1, group_size=2, groups_per_step=1),
        LadderSettings(out=tmp_path, seeds=3, eval_tasks=4, k=1),
    )  # fmt: skip
    assert " ".join(expected.split()) in " ".join(result.output.split())
    assert "about 1.3 hours" in " ".join(result.output.split())


def test_the_cpu_recipe_fits_a_24_gib_host_in_the_measured_cpu_plan():
    from trainer_client.train.memory_plan import plan_memory, run_shape, shape_of

    recipe = RECIPES["cpu-demo"]
    settings = TrainSettings(env=["http://127.0.0.1:9"], model="smollm2", alpha_sdpo=1.0, **recipe.train)
    assert plan_memory(shape_of("smollm2"), run_shape(settings, 1, "none", "cpu"), 24).fits


def test_the_overfit_recipe_trains_dr_grpo_alone_on_its_own_tasks_and_three_seeds_take_an_hour_at_most(tmp_path):
    """The check that a reward moves the policy at all: A1 on the training split, every group kept, no evaluation."""
    from trainer_client.train.memory_plan import plan_memory, run_shape, shape_of

    recipe = RECIPES["cpu-overfit"]
    train = TrainSettings(env=["http://127.0.0.1:9"], model="smollm2", **recipe.train)
    ladder = LadderSettings(out=tmp_path, **recipe.ladder)

    assert ladder.arms == ["a1"] and ladder.eval_tasks == 0 and ladder.seeds == 3
    assert (train.alpha_sdpo, train.beta_dpo, train.loss_type, train.split) == (0.0, 0.0, "dr_grpo", "train")
    assert train.uniform_groups == "keep"  # a dropped group would leave the step's mean reward, the curve's number
    # nor is any group dropped as stale (a first run lost its third group so): the stream buffers 2 a step's groups
    assert train.max_staleness >= 2 * train.groups_per_step
    # sampled at 1.0, a policy fine-tuned to an assistant loss of 0.036 derailed in every episode's first edit: reward 0
    assert train.temperature < 1.0
    # with 3 task ids, each half of the steps plays every task once: the first half's mean reward and the last's compare
    assert (train.steps // 2 * train.groups_per_step) % 3 == 0 and train.steps % 2 == 0
    assert train.lr_schedule == "constant"  # decaying to 0 over 6 steps, the last steps barely train
    assert plan_memory(shape_of("smollm2"), run_shape(train, 1, "none", "cpu"), 24).fits
    assert recipe.hours(train.steps, ladder.seeds, 0, len(ladder.arms)) <= 1.0
    summary = " ".join(recipe_summary(recipe, train, ladder).split())
    assert "1 arm x 3 seeds, each" in summary


def test_a_cpu_recipes_turn_budget_holds_the_longest_turn_of_the_demonstrations():
    """A turn cut at its token cap is a broken tool call: a policy fine-tuned on the demonstrations could never
    replay the longest of them (cpu-demo's 384 tokens cut 2 of the 3 demo tasks' edits: 416 and 671 tokens)."""
    assert RECIPES["cpu-demo"].train["max_turn_tokens"] >= DEMO_LONGEST_TURN_TOKENS
    assert RECIPES["cpu-overfit"].train["max_turn_tokens"] >= FUNCTION_DEMO_LONGEST_TURN_TOKENS


def test_every_gpu_recipe_fits_its_machine_in_the_plan_with_the_micro_batches_it_gets():
    """Before, a rank's whole share of a step was one forward: gpu-1x80gb planned 232 GiB, gpu-node-8x80gb 417."""
    from trainer_client.train.memory_plan import fitted_plan, plan_memory, run_shape, shape_of

    for recipe in (RECIPES["gpu-1x80gb"], RECIPES["gpu-node-8x80gb"]):
        settings = TrainSettings(env=["http://127.0.0.1:9"], model=recipe.model_shape, **recipe.train)
        run = run_shape(settings, settings.plan_gpus, settings.plan_sharding)
        plan = fitted_plan(shape_of(recipe.model_shape), run, 80.0)
        assert plan.fits and plan.run.forward_rows < run.rows, (recipe.name, plan.lines())
        assert not plan_memory(shape_of(recipe.model_shape), run, 80.0).fits  # all rows at once would not


@pytest.mark.parametrize(
    ("model", "options", "gpus", "sharding"),
    [("qwen2.5-7b", {"lora_r": 16}, 1, "none"), ("qwen2.5-1.5b", {}, 1, "none"), ("qwen2.5-7b", {}, 8, "fsdp")],
)
def test_the_targets_fit_80_gib_gpus_at_the_trainers_defaults(model, options, gpus, sharding):
    """7B LoRA and 1.5B full on one 80 GB GPU, 7B full over eight under FSDP (before: 232, 119 and 60+ GiB)."""
    from trainer_client.train.memory_plan import fitted_plan, run_shape, shape_of

    settings = TrainSettings(env=["http://127.0.0.1:9"], model=model, **options)
    plan = fitted_plan(shape_of(model), run_shape(settings, gpus, sharding), 80.0)
    assert plan.fits, plan.lines()


def test_regrow_ladder_plan_says_whether_a_recipe_fits_without_loading_anything(tmp_path):
    import json
    import shutil
    from pathlib import Path

    folder = tmp_path / "qwen-0.5b"  # a config alone: --plan reads the shape and loads no weight
    folder.mkdir()
    shapes = Path(__file__).resolve().parents[2] / "trainer_client" / "train" / "model_shapes"
    shutil.copy(shapes / "qwen2.5-0.5b.json", folder / "config.json")
    assert json.loads((folder / "config.json").read_text())["hidden_size"] > 0
    result = CliRunner().invoke(
        app, ["ladder", "--recipe", "gpu-1x80gb", "--model", str(folder), "--plan", "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert "fits" in result.output and "at once" in result.output
