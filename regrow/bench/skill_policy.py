"""A stand-in policy with a known skill on each task, for measuring what the env's task sampler does to the share of
GRPO groups with no reward variance (all pass or all fail).

A tiny random policy fails every task, so every group is zero-variance whatever the sampler. This one solves task t
with probability p(t): on its first turn it either writes the task's oracle patch (then applies it and submits) or
submits the workspace as it is. The rewards come from the real server's grader. The skills are spread as an early
policy's are, many tasks never or always solved and a few in between (SKILLS), assigned by a hash of the task id.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from proto.task_files import SOLUTION_PATCH, read_records
from trainer_client.rollout.agent_loop import GeneratedTurn

SKILLS = (0.0, 0.0, 0.0, 0.1, 0.5, 0.9, 1.0, 1.0)
PATCH_PATH = "regrow-oracle.patch"


def skill(task_id: str) -> float:
    """The chance the policy solves `task_id`: one of SKILLS, fixed by the id."""
    return SKILLS[int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % len(SKILLS)]


def _call(tool: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': tool, 'arguments': arguments})}\n</tool_call>"


class SkillSampler:
    """A TurnSampler over a task store: recognises the task by its problem statement in the context."""

    def __init__(self, tokenizer: Any, end_of_turn_id: int, store: Path, seed: int = 0):
        self.tokenizer, self.end_of_turn_id = tokenizer, end_of_turn_id
        self.version = 0
        self._rng = random.Random(seed)
        self._tasks = {
            record.problem_statement: (record.instance_id, (store / "hidden" / record.instance_id / SOLUTION_PATCH))
            for record in read_records(store)
        }

    async def generate(self, context_ids: list[int], max_new_tokens: int) -> GeneratedTurn:
        context = self.tokenizer.decode(context_ids)
        if PATCH_PATH in context:  # solving: the patch is written, then applied
            applied = "git apply" in context
            text = _call("submit") if applied else _call("run", command=f"git apply {PATCH_PATH} && rm {PATCH_PATH}")
        else:
            text = self._first_turn(context)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) >= max_new_tokens:
            raise ValueError(f"the scripted turn needs {len(ids) + 1} tokens; raise the turn's token limit")
        return GeneratedTurn(ids=[*ids, self.end_of_turn_id], logprobs=[0.0] * (len(ids) + 1), finished=True)

    def _first_turn(self, context: str) -> str:
        found = [task for statement, task in self._tasks.items() if statement and statement in context]
        if not found:
            return _call("submit")
        task_id, patch = found[0]
        if self._rng.random() >= skill(task_id):
            return _call("submit")
        return _call("write_file", path=PATCH_PATH, content=patch.read_text())
