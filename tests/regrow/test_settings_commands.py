"""`regrow train`, `ladder`, `serve` and `synth` take their options from their settings classes, through one parser:
each field is an option with its help and its REGROW_* variable, the names users know still work, a flag beats its
variable, and a bad value is named by its option."""

import pytest
from typer.testing import CliRunner

import env_server.cli
import task_synth.cli
import trainer_client.cli
from env_server.settings import ServerSettings
from regrow.cli import app
from task_synth.cli import SynthTargets
from task_synth.settings import SynthSettings
from trainer_client.train.ladder import LadderSettings
from trainer_client.train.settings import TrainSettings

COMMANDS = {
    "train": [TrainSettings],
    "ladder": [LadderSettings, TrainSettings],
    "serve": [ServerSettings],
    "synth": [SynthTargets, SynthSettings],
}


@pytest.fixture
def parsed(monkeypatch):
    """What each command was handed, instead of running it."""
    handed: list = []
    for part, name in (
        (trainer_client.cli, "train"),
        (trainer_client.cli, "ladder"),
        (env_server.cli, "serve"),
        (task_synth.cli, "synth"),
    ):
        monkeypatch.setattr(part, name, lambda *settings: handed.extend(settings))
    return handed


@pytest.mark.parametrize("command", COMMANDS)
def test_every_setting_is_an_option_with_its_help_and_variable(command):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    for settings_class in COMMANDS[command]:
        prefix = settings_class.model_config["env_prefix"]
        for name, field in settings_class.model_fields.items():
            if command == "ladder" and name == "output_dir":  # each arm's is OUT/a1..a4
                assert "--output-dir" not in said
                continue
            if f"--{name.replace('_', '-')} " in said:
                assert f"{prefix}{name.upper()}" in said
            else:
                assert f"{name.upper()} " in said, f"{command}: no --{name} and no argument {name.upper()}"
            assert field.description and " ".join(field.description.split()) in said, f"{command} --{name}: no help"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "--env", "http://a:1", "--env", "grpc://b:2"], {"env": ["http://a:1", "grpc://b:2"]}),
        (["train", "--env", "http://a:1,grpc://b:2"], {"env": ["http://a:1", "grpc://b:2"]}),
        (["train", "--env", "http://a:1", "--task-id", "t1", "--task-id", "t2"], {"task_ids": ["t1", "t2"]}),
        (["train", "--env", "http://a:1", "--lr", "3e-5"], {"learning_rate": 3e-5}),
        (["train", "--env", "http://a:1", "--vllm-timeout", "2"], {"vllm_timeout_s": 2.0}),
        (["train", "--env", "http://a:1", "--no-bf16", "--output-dir", "run"], {"bf16": False}),
        (["ladder", "--env", "http://a:1", "--out", "ladder", "--k", "2", "--lr", "1e-3"], {"k": 2}),
        (["serve", "--tasks", "store", "--traces", "t.sqlite", "--grpc-port", "9"], {"trace_db": "t.sqlite"}),
        (["serve", "--tasks", "store", "--max-episodes", "3"], {"tasks_dir": "store", "max_episodes": 3}),
        (["synth", "repo", "--out", "tasks", "--mode", "stub", "--mode", "file"], {"modes": ["stub", "file"]}),
        (["synth", "repo", "--out", "tasks", "--kind", "function", "--twins"], {"kinds": ["function"], "twins": True}),
        (["synth", "--repos", "r.txt", "--out", "t", "--max-tasks-per-repo", "3"], {"repos": "r.txt", "max_tasks": 3}),
        (["synth", "repo", "--out", "t", "--test-cmd", "pytest -x"], {"source": "repo", "test_command": "pytest -x"}),
        (["synth", "repo", "--out", "t", "--rewrite-url", "http://h/v1"], {"rewrite_base_url": "http://h/v1"}),
    ],
)
def test_the_option_names_users_know_reach_their_settings(parsed, argv, expected):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    values = {name: value for settings in parsed for name, value in settings.model_dump(mode="json").items()}
    assert {name: values[name] for name in expected} == expected


def test_a_flag_beats_its_variable_which_beats_the_default(parsed):
    env = {"REGROW_SERVER_HOST": "0.0.0.0", "REGROW_SERVER_PORT": "9000"}
    assert CliRunner().invoke(app, ["serve", "--host", "127.0.0.2"], env=env).exit_code == 0
    (settings,) = parsed
    assert (settings.host, settings.port, settings.grpc_port) == ("127.0.0.2", 9000, 50051)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["serve", "--max-episodes", "0"], "max_episodes: Input should be greater than or equal to 1"),
        (["synth", "repo", "--out", "t", "--test-fraction", "2"], "(--test-fraction or REGROW_SYNTH_TEST_FRACTION)"),
        (["synth", "repo"], "out: Field required (--out or REGROW_SYNTH_OUT)"),
    ],
)
def test_a_bad_value_is_named_by_its_option_and_variable(parsed, argv, named):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1 and named in " ".join(result.output.split()) and not parsed


def test_an_unknown_option_is_a_one_line_usage_error(parsed):
    result = CliRunner().invoke(app, ["serve", "--tasks", "store", "--bogus"])
    assert result.exit_code == 2 and "unrecognized arguments: --bogus" in result.output and not parsed
