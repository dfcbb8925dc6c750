"""Prefix resets: a fresh episode of a recorded episode's task, its workspace as it stood after the first k steps.

Prefix sampling (rolling a group out from a shared prefix of a past trajectory, so that its pass rate lands near one
half) needs an environment that can restore a mid-episode state. The state is rebuilt from the record, never by
running the agent's commands again: each recorded `write_file` and `edit_file` is replayed through the same tool and
must answer as it did then; read-only tools changed nothing; a command is accepted only where its step recorded that
it left the workspace's files as they were (`workspace_changed` false), which an episode records only when its reset
asked for `track_effects`. Anything else refuses the prefix, saying which step and why.
"""

from __future__ import annotations

import json
from typing import Any

from env_server.lifecycle.reset_options import ResetOptions
from env_server.settings import ServerSettings
from env_server.stepping.episode import Episode
from env_server.stepping.errors import EpisodeError
from env_server.stepping.tools import call_tool
from env_server.traces.store import TraceStore
from proto.actions import TOOL_ARGS
from proto.traces import EpisodeTrace, StepTrace

REPLAYED = frozenset({"write_file", "edit_file"})
READ_ONLY = frozenset({"read_file", "list_dir", "search"})


class PrefixRefused(EpisodeError):
    code, http_status = "PREFIX_REFUSED", 422


def prefix_origin(
    traces: TraceStore, options: ResetOptions, step_budget: int
) -> tuple[EpisodeTrace, list[StepTrace], int]:
    """(the recorded episode, the writes to replay, the prefix's steps) of a prefix reset; PrefixRefused when it
    cannot be had."""
    prefix_of, prefix_steps, task_id = options.prefix_of, options.prefix_steps, options.task_id
    if prefix_of is None or prefix_steps is None:
        raise PrefixRefused("a prefix reset takes both prefix_of (a recorded episode's id) and prefix_steps")
    origin = traces.get_episode(prefix_of)
    writes = replayed_steps(origin, prefix_of, prefix_steps)
    assert origin is not None  # replayed_steps refuses a missing episode
    if task_id is not None and task_id != origin.task_id:
        raise PrefixRefused(f"episode {prefix_of} played {origin.task_id!r}, not {task_id!r}: leave task_id out")
    if prefix_steps >= step_budget:
        raise PrefixRefused(f"a prefix of {prefix_steps} steps leaves none of the {step_budget}-step budget")
    return origin, writes, prefix_steps


def replay_prefix(episode: Episode, writes: list[StepTrace], settings: ServerSettings) -> None:
    """Write the prefix's files through the tools that wrote them; each must answer as it did when recorded."""
    for step in writes:
        args = TOOL_ARGS[step.action.tool].model_validate(step.action.args)
        result = call_tool(episode.sandbox_ready(), args, settings)
        if not same_answer(step, result.output, result.feedback):
            raise PrefixRefused(
                f"replaying {described(step)} of {episode.trace.prefix_of} answered "
                f"{(result.feedback or result.output)[:120]!r}, not {step.observation.output[:120]!r} as "
                "recorded: the task's workspace is no longer the one that episode started from"
            )


def replayed_steps(origin: EpisodeTrace | None, episode_id: str, steps: int) -> list[StepTrace]:
    """The steps among the first `steps` of `origin` that a replay writes; PrefixRefused when the prefix cannot be
    restored (no such episode, too many steps, a submission, a command whose effect is not known to be none)."""
    if origin is None:
        raise PrefixRefused(f"no recorded episode {episode_id!r}: prefix_of takes the id of an episode this server ran")
    if origin.prefix_of is not None:  # its own start is not in its steps
        raise PrefixRefused(
            f"episode {episode_id} itself started after {origin.prefix_steps} steps of {origin.prefix_of}: "
            "take a prefix of an episode that started from the task's own workspace"
        )
    recorded = len(origin.steps)
    if not 1 <= steps <= recorded:
        raise PrefixRefused(f"prefix_steps must be 1 to {recorded} (episode {episode_id} recorded {recorded} steps)")
    writes = []
    for step in origin.steps[:steps]:
        tool, number = step.action.tool, step.index + 1
        if tool in REPLAYED:
            writes.append(step)
        elif tool == "submit":
            raise PrefixRefused(
                f"step {number} of {episode_id} is its submission: a prefix ends before it (prefix_steps < {number})"
            )
        elif tool == "run":
            changed = step.observation.metadata.get("workspace_changed")
            if changed is not False:
                why = (
                    "changed files in the workspace"
                    if changed
                    else "has no recorded effect on the workspace (the episode was not reset with track_effects=true, "
                    "or the command's output was cut, or it timed out)"
                )
                raise PrefixRefused(
                    f"step {number} of {episode_id} ran {_shown(step.action.args.get('command'))}, which {why}; "
                    f"commands are not run again, so only prefix_steps < {number} can be restored"
                )
        elif tool not in READ_ONLY and not step.observation.metadata.get("tool_error"):
            raise PrefixRefused(f"step {number} of {episode_id} used {tool!r}, whose effect a replay cannot restore")
    return writes


def _shown(command: Any) -> str:
    text = str(command)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def same_answer(recorded: StepTrace, output: str, feedback: str | None) -> bool:
    """Whether a replayed write answered as the recorded one did (same bytes written, same refusal)."""
    return recorded.observation.output == output and recorded.observation.feedback == feedback


def described(step: StepTrace) -> str:
    return f"step {step.index + 1} ({step.action.tool} {json.dumps(step.action.args)[:80]})"
