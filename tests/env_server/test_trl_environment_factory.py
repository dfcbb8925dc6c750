"""A TRL `environment_factory` class over the unmodified OpenEnv client: TRL's tool extraction accepts it."""

import inspect

import pytest

from proto.actions import TOOL_ARGS
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS
from trainer_client.env.trl_environment import RegrowCodingEnv

transformers_utils = pytest.importorskip("transformers.utils", reason="the train extra is not installed")
pytest.importorskip("trl", reason="the train extra is not installed")
pytestmark = [pytest.mark.train]  # the engine where a test grades (its fixtures say so)


def trl_tool_methods(instance) -> list:
    """The methods GRPOTrainer exposes as tools (trl 1.16.0, grpo_trainer.py: public functions but reset/get_reward)."""
    members = inspect.getmembers(type(instance), predicate=inspect.isfunction)
    return [
        getattr(instance, name)
        for name, _ in members
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def test_trl_extracts_a_json_schema_per_tool_matching_the_server(memory_server, monkeypatch):
    server = memory_server  # the wire alone: no grading, no engine
    monkeypatch.setattr(RegrowCodingEnv, "base_url", server.http_url)
    env = RegrowCodingEnv()
    schemas = {
        s["function"]["name"]: s["function"] for s in map(transformers_utils.get_json_schema, trl_tool_methods(env))
    }
    assert set(schemas) == set(TOOL_ARGS)
    for name, args_model in TOOL_ARGS.items():
        server_schema = args_model.model_json_schema()
        assert set(schemas[name]["parameters"].get("properties", {})) == set(server_schema.get("properties", {})), name
        assert set(schemas[name]["parameters"].get("required", [])) == set(server_schema.get("required", [])), name


def test_environment_factory_class_plays_an_episode_and_owns_the_reward(server, monkeypatch):
    monkeypatch.setattr(RegrowCodingEnv, "base_url", server.http_url)
    env = RegrowCodingEnv()
    assert "clamp" in env.reset(task_id=DEMO_TASK_ID)
    assert "def clamp" in env.read_file("calc/ops.py")
    assert env.write_file("calc/ops.py", ORIGINAL_OPS).startswith("wrote")
    assert "graded: reward 1" in env.submit()
    assert env.get_reward() == 1.0
    env._client.close()
