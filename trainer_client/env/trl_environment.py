"""A TRL `environment_factory` class over the unmodified OpenEnv client, for training with TRL's own GRPOTrainer."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from proto.actions import TOOL_ARGS, tool_description


class RegrowCodingEnv:
    """One rollout's episode on a regrow env server, its tools as methods: pass the class as TRL's
    `environment_factory`.

    Set `base_url` (a subclass, or `RegrowCodingEnv.base_url = ...`) to your server. TRL calls `reset`, exposes
    every other public method as a tool from its signature and docstring, and reads `get_reward` at the end.
    The tool methods are made from proto's TOOL_ARGS, so they always match the server.
    """

    base_url = "http://127.0.0.1:8000"

    def __init__(self):
        from openenv.core.generic_client import GenericEnvClient

        self._client = GenericEnvClient(base_url=self.base_url).sync()
        self._reward = 0.0

    def reset(self, task_id: str | None = None, **kwargs) -> str:
        result = self._client.reset(task_id=task_id) if task_id else self._client.reset()
        self._reward = 0.0
        return result.observation["problem_statement"]

    def _call(self, tool: str, **args) -> str:
        result = self._client.step({"tool": tool, "args": {k: v for k, v in args.items() if v is not None}})
        if result.done:
            self._reward = float(result.reward or 0.0)
        observation = result.observation
        return "\n".join(filter(None, [observation["output"], observation.get("feedback")]))

    def get_reward(self) -> float:
        return self._reward


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
