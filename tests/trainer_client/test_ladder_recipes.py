"""`regrow ladder --recipe`: a ladder sized for one machine fills what the user left out, and says its hours first."""

import pytest
from typer.testing import CliRunner

from regrow.cli import app
from trainer_client.train.ladder import LadderSettings
from trainer_client.train.ladder_recipes import RECIPES, recipe_named, recipe_summary, with_recipe
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
    with pytest.raises(ValueError, match="the recipes are cpu-demo, gpu-1x80gb, gpu-node-8x80gb"):
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
