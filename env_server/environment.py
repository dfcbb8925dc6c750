"""The coding environment as an OpenEnv `Environment`: one instance per session, backed by EpisodeRuntime."""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from functools import cached_property
from typing import Any

from fastmcp import FastMCP
from fastmcp.tools.function_tool import FunctionTool
from openenv.core.env_server import Environment
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.env_server.types import EnvironmentMetadata

from env_server.lifecycle.reset_options import ResetOptions
from env_server.lifecycle.runtime import EpisodeRuntime
from env_server.stepping.episode import Episode
from env_server.stepping.errors import NoEpisode
from proto.actions import ToolCall, tool_specs
from proto.observations import CodingObservation, EpisodeState

# Set for plain HTTP POST /reset and /step, where OpenEnv makes an environment per request and closes it after.
PER_REQUEST: ContextVar[bool] = ContextVar("per_request", default=False)


class CodingEnvironment(Environment[ToolCall, CodingObservation, EpisodeState]):
    """A repository with a piece deleted; the agent restores it with tools and is graded by hidden tests."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, runtime: EpisodeRuntime):
        super().__init__()
        self.runtime = runtime
        self.episode: Episode | None = None
        self.per_request = PER_REQUEST.get()

    @property
    def episode_id(self) -> str:
        """The running episode's id; RuntimeError before the first reset."""
        if self.episode is None:
            raise RuntimeError("no episode yet: send reset first")
        return self.episode.id

    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> CodingObservation:
        """Start an episode on `task_id`, or on a task sampled from `split` with `seed`: uniformly, or with
        `sampler="frontier"` by recorded pass rate (the server's REGROW_SERVER_SAMPLER when not given). With
        `prefix_of` and `prefix_steps`, start from a recorded episode's workspace after that many of its steps; the
        answer's metadata["prefix"] shows them. `origin` (training, evaluation or demonstration) and `run_id` say why
        and by whom the episode is played: the frontier sampler reads the drawing run's training episodes alone. With
        `track_effects=True` each command records whether it changed the workspace, which a later prefix reset needs.
        Other options are ignored (lifecycle/reset_options.py).

        Over plain HTTP the episode outlives the request: /step continues it by the id in the answer's metadata.
        """
        plan = self.runtime.plan_reset(ResetOptions.of(seed, options))  # a bad reset must not end the running one
        if self.episode is not None and not self.episode.addressable:
            self.runtime.abort(self.episode, "reset again")
        self.episode = self.runtime.start_episode(plan, episode_id, addressable=self.per_request)
        return self.runtime.reset_observation(self.episode)

    def step(
        self, action: ToolCall, timeout_s: float | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CodingObservation:
        """Run one tool call; `episode_id` continues an addressable episode (stateless HTTP /step)."""
        episode = self.runtime.get(episode_id) if episode_id else self.episode
        if episode is None and self.per_request:
            raise NoEpisode("POST /step needs the `episode_id` from the metadata of POST /reset's answer")
        if episode is None:
            raise NoEpisode("no episode in this session; send reset first")
        if isinstance(action, ListToolsAction):
            return CodingObservation(tools=tool_specs(), metadata={"episode_id": episode.id})
        if isinstance(action, CallToolAction):
            action = ToolCall(tool=action.tool_name, args=action.arguments)
        return self.runtime.stepper.take_step(episode, action)

    @property
    def state(self) -> EpisodeState:
        episode = self.episode
        if episode is None:
            return EpisodeState()
        return EpisodeState(
            episode_id=episode.id,
            step_count=episode.steps_taken,
            task_id=episode.task.id,
            done=episode.done,
            steps_left=episode.steps_left,
            seconds_left=round(max(0.0, episode.deadline - time.monotonic()), 1),
        )

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="regrow-coding",
            description="Restore deleted code in a Python repository; graded by the repository's hidden tests.",
            version="0.1.0",
        )

    def close(self) -> None:
        """End the session's episode unless a client addresses it by id."""
        if self.episode is not None and not self.episode.addressable:
            self.runtime.abort(self.episode, "session closed")

    @cached_property
    def mcp_server(self) -> FastMCP:
        """The tools as an MCP server bound to this session, for `tools/list` and `tools/call` on /mcp."""
        server = FastMCP("regrow-coding")
        for spec in tool_specs():
            server.add_tool(
                FunctionTool(
                    name=spec["name"],
                    description=spec["description"],
                    parameters=spec["parameters"],
                    fn=self._mcp_tool(spec["name"]),
                )
            )
        return server

    def _mcp_tool(self, name: str):
        async def call(**arguments: Any) -> dict[str, Any]:
            observation = await asyncio.to_thread(self.step, ToolCall(tool=name, args=arguments))
            return observation.model_dump(mode="json", exclude={"tools", "problem_statement"})

        return call

    # OpenEnv's task API (GET /<env>/splits, POST /<env>/tasks, ...).
    def list_splits(self) -> list[str]:
        return self.runtime.store.splits()

    def list_tasks(self, split: str) -> list[dict[str, str]]:
        return [
            {"id": t.id, "problem_statement": t.record.problem_statement}
            for t in self.runtime.store.tasks.values()
            if t.record.split == split
        ]

    def num_tasks(self, split: str) -> int:
        return len(self.list_tasks(split))

    def get_task(self, split: str, index: int) -> dict[str, str]:
        return self.list_tasks(split)[index]
