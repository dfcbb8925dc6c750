"""`regrow traces demo`: each task's own solution played through a live env server the way an agent works (read the
file, edit it, run the tests, submit), so that the server records well-formed tool-call episodes, to export and to
fine-tune a policy on, with no teacher model."""

from __future__ import annotations

import asyncio
import logging
import shlex
from dataclasses import dataclass

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from proto.actions import ToolCall
from proto.tasks import TaskRecord
from trainer_client.env.client import EnvClient
from trainer_client.env.errors import EnvError

logger = logging.getLogger(__name__)

# The run step names at most this many of the task's tests; the grader runs them all at submit.
MAX_TESTS_RUN = 20


class DemoError(ValueError):
    """A task whose solution cannot be played as tool calls."""


@dataclass(frozen=True)
class Demonstration:
    """One task's solution as played: its reward, steps and the server's episode id (None when it failed to start)."""

    task_id: str
    reward: float
    steps: int
    episode_id: str | None
    error: str | None = None


def solution_calls(patch: str) -> list[ToolCall]:
    """The tool calls that apply `patch` as an agent would: for each changed file, a read, then one edit per hunk; a
    file the patch adds is written whole."""
    try:
        changed_files = PatchSet(patch)
    except UnidiffParseError as error:
        raise DemoError(f"the solution patch does not parse: {error}") from error
    calls: list[ToolCall] = []
    for changed in changed_files:
        if changed.is_binary_file or changed.is_removed_file:
            raise DemoError(f"{changed.path}: a binary or removed file cannot be written by the tools")
        if changed.is_added_file:
            content = "".join(line.value for hunk in changed for line in hunk.target_lines())
            calls.append(ToolCall(tool="write_file", args={"path": changed.path, "content": content}))
            continue
        calls.append(ToolCall(tool="read_file", args={"path": changed.path}))
        for hunk in changed:
            old = "".join(line.value for line in hunk.source_lines())
            new = "".join(line.value for line in hunk.target_lines())
            calls.append(ToolCall(tool="edit_file", args={"path": changed.path, "old": old, "new": new}))
    if not calls:
        raise DemoError("the solution patch changes no file")
    return calls


def run_tests_call(record: TaskRecord) -> ToolCall:
    """The task's own test command on the tests it must make pass (those in the workspace, at most MAX_TESTS_RUN)."""
    visible = [test for test in record.FAIL_TO_PASS if "::" in test and not test.startswith("hidden")]
    return ToolCall(
        tool="run", args={"command": shlex.join([*shlex.split(record.test_command), *visible[:MAX_TESTS_RUN]])}
    )


async def play_solution(client: EnvClient, record: TaskRecord) -> Demonstration:
    """Reset `record`'s task, play its solution's calls, run its tests and submit; the episode as the server graded."""
    calls = [*solution_calls(record.solution_patch), run_tests_call(record), ToolCall(tool="submit")]
    async with client.episode(task_id=record.instance_id, origin="demonstration") as episode:
        episode_id = episode.first.metadata.get("episode_id")
        reward = 0.0
        for call in calls:
            observation = await episode.step(call)
            if observation.feedback and call.tool != "run":  # a failing test run is expected before the submit
                logger.warning("%s: %s went wrong: %s", record.instance_id, call.tool, observation.feedback)
            if episode.done:
                reward = float(observation.reward or 0.0)
                break
        return Demonstration(record.instance_id, reward, episode.steps, episode_id)


async def demonstrate(url: str, records: list[TaskRecord], concurrency: int = 2) -> list[Demonstration]:
    """Play every record's solution on the env server at `url`, `concurrency` at a time, in the records' order."""
    client = EnvClient(url, max_connections=concurrency)

    async def one(record: TaskRecord) -> Demonstration:
        try:
            return await play_solution(client, record)
        except (DemoError, EnvError) as error:
            logger.warning("%s: not demonstrated: %s", record.instance_id, error)
            return Demonstration(record.instance_id, 0.0, 0, None, str(error))

    try:
        return list(await asyncio.gather(*map(one, records)))
    finally:
        await client.aclose()
