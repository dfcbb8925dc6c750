"""A TRL `environment_factory` class over the unmodified OpenEnv client: TRL's tool extraction accepts it, the
factory pickles, a cut-off episode is still graded, and the task dataset keeps each GRPO group on one task."""

import functools
import inspect
import json
import pickle
import re
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from transformers import utils as transformers_utils

from proto.actions import TOOL_ARGS
from proto.traces import EpisodeTrace
from proto.transcript import observation_text
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS, TWIN_TASK_ID
from trainer_client.env.trl_environment import URL_VARIABLE, RegrowCodingEnv, task_dataset

pytestmark = [pytest.mark.train]  # the engine where a test grades (its fixtures say so)


def trl_tool_methods(instance) -> list:
    """The methods GRPOTrainer exposes as tools (trl 1.16.0, grpo_trainer.py: public functions but reset/get_reward)."""
    members = inspect.getmembers(type(instance), predicate=inspect.isfunction)
    return [
        getattr(instance, name)
        for name, _ in members
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def played_since(url: str, started: datetime) -> list[dict]:
    """The episodes the server at `url` recorded since `started`, oldest first."""
    listed = httpx.get(f"{url}/episodes", params={"since": started.isoformat()}).json()
    return sorted(listed, key=lambda episode: episode["started_at"])


def test_trl_extracts_a_json_schema_per_tool_matching_the_server(memory_server):
    env = RegrowCodingEnv(base_url=memory_server.http_url)  # the wire alone: no grading, no engine
    schemas = {
        s["function"]["name"]: s["function"] for s in map(transformers_utils.get_json_schema, trl_tool_methods(env))
    }
    assert set(schemas) == set(TOOL_ARGS)
    for name, args_model in TOOL_ARGS.items():
        server_schema = args_model.model_json_schema()
        assert set(schemas[name]["parameters"].get("properties", {})) == set(server_schema.get("properties", {})), name
        assert set(schemas[name]["parameters"].get("required", [])) == set(server_schema.get("required", [])), name
    env._client.close()


def test_the_factory_pickles_with_its_url_for_a_worker_process(memory_server, monkeypatch):
    """TRL's async trainer pickles the factory into a spawned worker: the URL travels in it, not in a class attribute
    the worker would never see."""
    monkeypatch.setenv(URL_VARIABLE, "http://127.0.0.1:9")  # the default a worker would fall back to: nothing there
    factory = pickle.loads(pickle.dumps(functools.partial(RegrowCodingEnv, base_url=memory_server.http_url)))
    env = factory()
    assert env.base_url == memory_server.http_url
    assert "clamp" in env.reset(task_id=DEMO_TASK_ID)
    env._client.close()
    assert RegrowCodingEnv().base_url == "http://127.0.0.1:9"  # no URL given: $REGROW_ENV_URL


def test_get_reward_submits_an_episode_trl_cut_off_and_returns_its_grade(memory_server):
    """A rollout that ran out of tool iterations or tokens before `submit` is graded as it stands, not scored 0 and
    left holding its sandbox until the idle timeout."""
    started = datetime.now(UTC)
    env = RegrowCodingEnv(base_url=memory_server.http_url)
    env.reset(task_id=DEMO_TASK_ID)
    assert env.write_file("calc/ops.py", ORIGINAL_OPS).startswith("wrote")
    assert env.get_reward() == 1.0
    assert env.get_reward() == 1.0  # asked again: the same grade, no second submission
    env._client.close()
    [episode] = played_since(memory_server.http_url, started)
    assert episode["status"] == "submitted" and episode["reward"] == 1.0


def test_a_reset_after_an_unfinished_episode_ends_it_on_the_server(memory_server):
    """A pooled instance reset again before its episode was submitted does not leak that episode's sandbox."""
    started = datetime.now(UTC)
    env = RegrowCodingEnv(base_url=memory_server.http_url)
    env.reset(task_id=DEMO_TASK_ID)
    env.reset(task_id=DEMO_TASK_ID)
    assert env.get_reward() == 0.0  # the untouched workspace, submitted
    env._client.close()
    assert [episode["status"] for episode in played_since(memory_server.http_url, started)] == ["aborted", "submitted"]


def test_a_tool_answers_with_what_regrows_own_loop_shows_its_policy(memory_server):
    """The text of a step's result is proto's transcript text on both training paths: the output with its exit code,
    and never the env's feedback (regrow's own trainer hands that to SDPO's teacher alone)."""
    env = RegrowCodingEnv(base_url=memory_server.http_url)
    env.reset(task_id=DEMO_TASK_ID)
    answers = [env.run("exit 3"), env.read_file("nope.py")]
    episode_id = env._client.state()["episode_id"]
    env._client.close()
    trace = EpisodeTrace.model_validate(httpx.get(f"{memory_server.http_url}/episodes/{episode_id}").json())
    assert answers == [observation_text(step.observation) for step in trace.steps]
    assert answers[0] == "[exit code: 3]" and "no such file" in (trace.steps[1].observation.feedback or "")
    assert "no such file" not in answers[1]


def test_task_dataset_holds_one_row_a_task_of_the_split(two_task_memory_server):
    """Each row names its task for `reset` and leaves the prompt to the problem statement `reset` returns."""
    rows = task_dataset(two_task_memory_server.http_url).to_list()
    assert sorted(row["task_id"] for row in rows) == sorted([DEMO_TASK_ID, TWIN_TASK_ID])
    assert all(row["prompt"] == [{"role": "user", "content": ""}] for row in rows)
    with pytest.raises(ValueError, match="no task in split 'test'.*its splits: train"):
        task_dataset(two_task_memory_server.http_url, split="test")


def test_environment_factory_class_plays_an_episode_and_owns_the_reward(server):
    env = RegrowCodingEnv(base_url=server.http_url)
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

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.chdir(tmp_path)
    probe = RegrowCodingEnv(base_url=server.http_url)
    model, tokenizer = tool_calling_policy(probe)
    probe._client.close()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    started = datetime.now(UTC)

    snippet = readme_trl_snippet().replace("http://127.0.0.1:8000", server.http_url)
    scope = {"model": model, "tokenizer": tokenizer}  # the README's `model` and `tokenizer`
    exec(compile(snippet, str(README), "exec"), scope)

    trainer = scope["trainer"]
    assert trainer.state.global_step == 1
    played = played_since(server.http_url, started)
    rewards = sorted(e["reward"] for e in played if e["status"] == "submitted")
    assert len(rewards) >= 2 and rewards[0] == 0.0 and rewards[-1] == 1.0, played
    moved = [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert moved, "one GRPO step on rewards 0 and 1 changed no weight"


def test_trl_grpo_groups_each_play_one_task_and_the_dataset_reaches_every_task(
    two_task_memory_server, tmp_path, monkeypatch
):
    """GRPOTrainer on `task_dataset`, two steps of one group of four on a server of two tasks: a group's rollouts all
    play its task (so its baseline compares like with like), and the two steps play both tasks."""
    from trl import GRPOConfig, GRPOTrainer

    url = two_task_memory_server.http_url
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.chdir(tmp_path)
    probe = RegrowCodingEnv(base_url=url)
    model, tokenizer = tool_calling_policy(probe)
    probe._client.close()
    started = datetime.now(UTC)

    config = GRPOConfig(
        output_dir="grpo-regrow",
        max_steps=2,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=512,
        max_tool_calling_iterations=2,
        use_cpu=True,
        report_to="none",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=config,
        train_dataset=task_dataset(url),
        environment_factory=functools.partial(RegrowCodingEnv, base_url=url),
    )
    trainer.train()

    played = played_since(url, started)
    groups = [played[start : start + 4] for start in range(0, len(played), 4)]
    assert len(played) == 8 and all(episode["status"] == "submitted" for episode in played), played
    assert [len({episode["task_id"] for episode in group}) for group in groups] == [1, 1], played
    assert {group[0]["task_id"] for group in groups} == {DEMO_TASK_ID, TWIN_TASK_ID}
