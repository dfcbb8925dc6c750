"""`regrow bench mutants`: what one-token mutants of each task's own solution earn from the grader.

A mutant is the solution with one small change in one deleted unit (task_synth/validation/mutants.py). A grader
whose checks are strong pays a mutant less than 1 wherever a call tells it apart from the original; a mutant paid
1.0 is either equivalent to the original or slipped past every check of its unit.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

from env_server.grading import PristineCache, grade
from env_server.lifecycle.provisioning import seed
from env_server.settings import ServerSettings
from env_server.task_store import Task, TaskStore
from proto import is_pass
from regrow.bench.grading import _apply_solution
from sandbox import DockerBackend
from sandbox.layout import WORKSPACE
from sandbox.settings import SandboxSettings
from task_synth.validation.mutants import mutants_of


def _originals(backend: DockerBackend, task: Task) -> dict[str, str]:
    """Each deleted unit's file as the solution has it, read from a task container with the solution applied."""
    sb = seed(task, backend.create(task.record.image, limits=SandboxSettings().limits()))
    try:
        _apply_solution(sb, task)
        paths = {unit.path for unit in task.record.deleted}
        return {path: sb.read_file(f"{WORKSPACE}/{path}").decode() for path in paths}
    finally:
        sb.destroy()


def _graded(backend: DockerBackend, task: Task, files: dict[str, str], settings: ServerSettings, cache) -> float:
    """The reward of a submission that is the solution with `files` written over it."""
    limits = SandboxSettings().limits()
    agent = seed(task, backend.create(task.record.image, limits=limits))
    try:
        _apply_solution(agent, task)
        for path, text in files.items():
            agent.write_file(f"{WORKSPACE}/{path}", text)

        def fresh():
            return seed(task, backend.create(task.record.image, limits=limits))

        return grade(task, agent, fresh, cache, settings.grade_limits()).reward
    finally:
        agent.destroy()


def run_mutant_bench(tasks_dir: Path, max_tasks: int, per_unit: int, seed_value: int) -> dict:
    """Up to `per_unit` mutants of each deleted unit of the first `max_tasks` tasks (by id), each graded."""
    backend, settings, cache = DockerBackend(), ServerSettings(tasks_dir=tasks_dir), PristineCache()
    rows: list[dict] = []
    for task in sorted(TaskStore(tasks_dir).tasks.values(), key=lambda t: t.id)[:max_tasks]:
        originals = _originals(backend, task)
        rng = random.Random(f"{seed_value}:{task.id}")
        rewards: list[dict] = []
        for unit in task.record.deleted:
            if unit.kind == "module":
                continue
            for mutant in mutants_of(originals[unit.path], unit.qualname, rng, per_unit):
                reward = _graded(backend, task, {unit.path: mutant.source}, settings, cache)
                rewards.append({"unit": unit.qualname, "kind": mutant.kind, "line": mutant.line, "reward": reward})
        rows.append(
            {
                "task": task.id,
                "units": len(task.record.deleted),
                "mutants": len(rewards),
                "paid_full": sum(is_pass(r["reward"]) for r in rewards),
                "paid_some": sum(r["reward"] > 0 for r in rewards),
                "full": [r for r in rewards if is_pass(r["reward"])],
            }
        )
    graded: int = sum(row["mutants"] for row in rows)
    return {
        "tasks": rows,
        "mutants": graded,
        "paid_full": sum(row["paid_full"] for row in rows),
        "paid_some": sum(row["paid_some"] for row in rows),
        "tasks_with_a_mutant_paid_full": sum(row["paid_full"] > 0 for row in rows),
        "median_mutants_per_task": statistics.median([int(row["mutants"]) for row in rows]) if rows else 0,
    }
