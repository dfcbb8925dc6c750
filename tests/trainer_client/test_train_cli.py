"""`regrow train` reads every setting from REGROW_TRAIN_* variables, and a flag given on the command line wins."""

import typer
from typer.testing import CliRunner

from regrow.cli import app
from trainer_client.cli import _SETTING_OF_PARAMETER
from trainer_client.train_settings import TrainSettings


def test_every_train_flag_is_a_setting_with_the_same_default():
    command = typer.main.get_command(app).commands["train"]
    fields = TrainSettings.model_fields
    for parameter in command.params:
        name = _SETTING_OF_PARAMETER.get(parameter.name, parameter.name)
        assert name in fields, f"--{parameter.name} has no TrainSettings field"
        default = fields[name].get_default(call_default_factory=True)
        if parameter.default not in (None, ()):
            assert parameter.default == default, f"--{parameter.name} defaults to {parameter.default!r}, the setting to {default!r}"


def test_variables_configure_the_run_when_no_flag_is_given(tmp_path):
    env = {"REGROW_TRAIN_ENV": "http://127.0.0.1:9", "REGROW_TRAIN_MODEL": str(tmp_path / "from-variable")}
    result = CliRunner().invoke(app, ["train", "--device", "cpu"], env=env)
    assert result.exit_code == 1
    assert "from-variable" in result.output


def test_a_flag_overrides_its_variable(tmp_path):
    env = {"REGROW_TRAIN_ENV": "http://127.0.0.1:9", "REGROW_TRAIN_MODEL": str(tmp_path / "from-variable")}
    result = CliRunner().invoke(app, ["train", "--device", "cpu", "--model", str(tmp_path / "from-flag")], env=env)
    assert result.exit_code == 1
    assert "from-flag" in result.output and "from-variable" not in result.output


def test_a_missing_env_url_is_a_clear_error():
    result = CliRunner().invoke(app, ["train"], env={"REGROW_TRAIN_ENV": ""})
    assert result.exit_code == 1
    assert "env" in result.output
