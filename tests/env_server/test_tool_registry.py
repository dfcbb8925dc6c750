"""Each tool is declared once, in proto's TOOL_ARGS; everything else is derived from it (no Docker)."""

import inspect
from pathlib import Path

from env_server.stepping.tools import IMPLEMENTATIONS
from proto.actions import TOOL_ARGS, tool_description, tool_specs
from trainer_client.env.trl_environment import RegrowCodingEnv


def test_every_tool_but_the_terminal_one_has_exactly_one_implementation():
    terminal = [name for name, model in TOOL_ARGS.items() if model.terminal]
    assert terminal == ["submit"]
    assert set(IMPLEMENTATIONS) == {model for model in TOOL_ARGS.values() if not model.terminal}


def test_specs_carry_the_models_docstring_and_schema():
    specs = {spec["name"]: spec for spec in tool_specs()}
    assert list(specs) == list(TOOL_ARGS)
    for name, model in TOOL_ARGS.items():
        assert specs[name]["description"] == tool_description(name) != ""
        assert specs[name]["parameters"] == model.model_json_schema()


def test_the_trl_class_has_one_method_per_tool_with_the_models_signature():
    for name, model in TOOL_ARGS.items():
        method = getattr(RegrowCodingEnv, name)
        parameters = inspect.signature(method).parameters
        assert list(parameters)[1:] == list(model.model_fields), name
        assert method.__doc__.startswith(tool_description(name))
        for field, info in model.model_fields.items():
            assert f"{field}: {info.description}" in method.__doc__
            assert (parameters[field].default is inspect.Parameter.empty) == info.is_required()


def test_the_readme_names_every_tool():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in TOOL_ARGS)
