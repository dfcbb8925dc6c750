"""A TRL `environment_factory` class over the unmodified OpenEnv client, for training with TRL's own GRPOTrainer,
and the dataset of the server's tasks that keeps each GRPO group on one task."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

from proto.actions import TOOL_ARGS, tool_description
from proto.observations import CodingObservation
from proto.transcript import observation_text
from trainer_client.env.errors import EnvError

if TYPE_CHECKING:
    from datasets import Dataset

URL_VARIABLE = "REGROW_ENV_URL"
DEFAULT_URL = "http://127.0.0.1:8000"


def env_url(base_url: str | None = None) -> str:
    """The env server's URL: `base_url`, else $REGROW_ENV_URL, else the local default."""
    return base_url or os.environ.get(URL_VARIABLE) or DEFAULT_URL


class RegrowCodingEnv:
    """One rollout's episode on a regrow env server, its tools as methods: pass
    `functools.partial(RegrowCodingEnv, base_url=URL)` as TRL's `environment_factory` (it pickles, so TRL's async
    worker process gets the URL too).

    TRL calls `reset` with each dataset row's columns (a `task_id` column picks the task), exposes every other public
    method as a tool from its signature and docstring, and reads `get_reward` at the end. The tool methods are made
    from proto's TOOL_ARGS, so they always match the server.
    """

    # A subclass may name its server here; setting it on this class at run time does not reach a spawned worker.
    base_url: str | None = None

    def __init__(self, base_url: str | None = None):
        from openenv.core.generic_client import GenericEnvClient

        self.base_url = env_url(base_url or type(self).base_url)
        self._client = GenericEnvClient(base_url=self.base_url).sync()
        self._reward = 0.0
        self._done = True  # no episode to submit before the first reset

    def reset(self, task_id: str | None = None, **kwargs) -> str:
        # An episode this session left unfinished is aborted by the server on this reset, its sandbox freed.
        result = self._client.reset(task_id=task_id) if task_id else self._client.reset()
        self._reward, self._done = 0.0, False
        return result.observation["problem_statement"]

    def _call(self, tool: str, **args) -> str:
        result = self._client.step({"tool": tool, "args": {k: v for k, v in args.items() if v is not None}})
        if result.done:
            self._reward, self._done = float(result.reward or 0.0), True
        observation = CodingObservation.model_validate({**result.observation, "done": result.done})
        # What regrow's own loop shows its policy: the env's feedback stays out of the context (proto/transcript.py).
        return observation_text(observation)

    def get_reward(self) -> float:
        """The grader's reward for this rollout. A rollout TRL cut off before the policy called `submit` (its tool
        iterations or completion length ran out) is submitted here, so it is graded as it stands and its sandbox
        freed."""
        if not self._done:
            self._call("submit")
        return self._reward


def task_dataset(base_url: str | None = None, split: str = "train") -> Dataset:
    """The tasks of `split` on the env server as a TRL train dataset, one row a task: an empty user `prompt` that
    `reset`'s problem statement fills, and the `task_id` TRL passes to `reset`. TRL repeats a row once per
    generation, so every rollout of a GRPO group plays the same task and the group's baseline compares like with like.
    """
    from datasets import Dataset

    url = env_url(base_url)
    try:
        with httpx.Client(base_url=url, timeout=30.0) as http:
            [name] = http.get("/list_environments").raise_for_status().json()[:1]
            tasks = http.post(f"/{name}/tasks", json={"split": split}).raise_for_status().json()["tasks"]
            splits = [entry["name"] for entry in http.get(f"/{name}/splits").raise_for_status().json()]
    except (httpx.HTTPError, ValueError, KeyError) as error:
        raise EnvError(
            f"could not list the tasks of the env server at {url}: {error}; is `regrow serve` there?"
        ) from None
    if not tasks:
        raise ValueError(
            f"the env server at {url} has no task in split {split!r} (its splits: {', '.join(splits) or 'none'}); "
            f"pass one of those as `split`, or serve a store made with `regrow synth --split {split}`"
        )
    ids = [task["id"] for task in tasks]
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}] for _ in ids], "task_id": ids})


def _tool_method(name: str) -> Callable[..., str]:
    """A method for tool `name` whose signature and Google-style docstring TRL turns into the tool's schema."""
    fields = TOOL_ARGS[name].model_fields
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(
            field,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=inspect.Parameter.empty if info.is_required() else info.default,
            annotation=info.annotation,
        )
        for field, info in fields.items()
    ]
    signature = inspect.Signature(parameters, return_annotation=str)

    def method(self: RegrowCodingEnv, *args: object, **kwargs: object) -> str:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return self._call(name, **{key: value for key, value in bound.arguments.items() if key != "self"})

    args_doc = "".join(f"\n    {field}: {info.description}" for field, info in fields.items())
    method.__name__, method.__qualname__ = name, f"RegrowCodingEnv.{name}"
    method.__doc__ = tool_description(name) + (f"\n\nArgs:{args_doc}" if fields else "")
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = {field: info.annotation for field, info in fields.items()} | {"return": str}
    return method


for _name in TOOL_ARGS:
    setattr(RegrowCodingEnv, _name, _tool_method(_name))
