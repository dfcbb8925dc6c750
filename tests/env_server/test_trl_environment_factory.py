"""A TRL `environment_factory` class over the unmodified OpenEnv client: TRL's tool extraction accepts it."""

import inspect
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import httpx
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


README = Path(__file__).resolve().parents[2] / "README.md"
STUB = "    raise NotImplementedError\n"
FIX = ORIGINAL_OPS.split('high]."""\n')[1]
SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


def tool_call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def readme_trl_snippet() -> str:
    """The README's TRL example, the code this test runs."""
    found = re.search(r"<!-- trl-grpo-example -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert found, "README lost its TRL GRPOTrainer example"
    return found.group(1)


def tool_calling_policy(env: RegrowCodingEnv):
    """A random tiny Qwen2 taught to open the demo task's episode with one of two answers, alike: the fix then submit
    (reward 1), or submit alone (reward 0). So a group's rewards differ and GRPO has a gradient."""
    from tests.tiny_chat_model import random_qwen2, teach_completions, tool_calling_template, train_chatml_tokenizer

    statement = env.reset(task_id=DEMO_TASK_ID)
    fix = tool_call("edit_file", path="calc/ops.py", old=STUB, new=FIX)
    answers = [f"{fix}\n{SUBMIT}<|im_end|>", f"{SUBMIT}<|im_end|>"]
    messages, tools = [{"role": "user", "content": statement}], trl_tool_methods(env)
    # A vocabulary learnt across words from the prompt and the answers makes each a few tokens: taught in a second,
    # and sampled whole rather than garbled somewhere along a hundred tokens.
    draft = train_chatml_tokenizer([tool_calling_template(), *answers], 300)
    draft.chat_template = tool_calling_template()
    prompt_text = draft.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    tokenizer = train_chatml_tokenizer([prompt_text] * 4 + answers * 40, 3000, across_words=True)
    tokenizer.chat_template = draft.chat_template
    prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)
    prompt_ids = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    model = random_qwen2(tokenizer, 64, 128, 4096, tie_embeddings=True)
    teach_completions(model, tokenizer, prompt_ids, answers, steps=100)
    return model, tokenizer


def test_trl_grpo_trainer_takes_a_step_on_the_graders_rewards_from_the_live_server(server, tmp_path, monkeypatch):
    """TRL's own GRPOTrainer with `environment_factory=RegrowCodingEnv`, the README's code: episodes are played on the
    real server, their rewards are regrow's grader's, and one optimizer step moves the weights."""
    import torch

    monkeypatch.setattr(RegrowCodingEnv, "base_url", server.http_url)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.chdir(tmp_path)
    probe = RegrowCodingEnv()
    model, tokenizer = tool_calling_policy(probe)
    probe._client.close()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    started = datetime.now(UTC)

    snippet = readme_trl_snippet().replace("http://127.0.0.1:8000", server.http_url)
    scope = {"model": model, "tokenizer": tokenizer}  # the README's `model` and `tokenizer`
    exec(compile(snippet, str(README), "exec"), scope)

    trainer = scope["trainer"]
    assert trainer.state.global_step == 1
    played = httpx.get(f"{server.http_url}/episodes", params={"since": started.isoformat()}).json()
    rewards = sorted(e["reward"] for e in played if e["status"] == "submitted")
    assert len(rewards) >= 2 and rewards[0] == 0.0 and rewards[-1] == 1.0, played
    moved = [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert moved, "one GRPO step on rewards 0 and 1 changed no weight"
