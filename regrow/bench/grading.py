"""`regrow bench grade`: what the hardened grading costs over a bare pytest run of the same tests in the same image."""

from __future__ import annotations

import shlex
import statistics
import time
from pathlib import Path

from env_server.grading import PristineCache, grade
from env_server.lifecycle.provisioning import seed
from env_server.settings import ServerSettings
from env_server.task_store import Task, TaskStore
from sandbox import DockerBackend, Sandbox
from sandbox.layout import WORKSPACE
from sandbox.settings import SandboxSettings


def _bare_run(backend: DockerBackend, task: Task, timeout_s: float) -> float:
    """A fresh container, the task's own test command on F2P + P2P with the solution in place, and its removal."""
    started = time.perf_counter()
    sb = seed(task, backend.create(task.record.image, limits=SandboxSettings().limits()))
    seconds = time.perf_counter() - started
    try:
        _apply_solution(sb, task)  # not timed: grading starts from a workspace the agent already changed
        started = time.perf_counter()
        tests = shlex.join([*task.record.FAIL_TO_PASS, *task.record.PASS_TO_PASS])
        sb.exec(f"{task.record.test_command} -q {tests}", timeout=timeout_s, cwd=WORKSPACE)
    finally:
        sb.destroy()
    return seconds + time.perf_counter() - started


def _apply_solution(sb: Sandbox, task: Task) -> None:
    sb.write_file("/home/agent/solution.patch", task.record.solution_patch)
    applied = sb.exec(["git", "apply", "/home/agent/solution.patch"], timeout=60, cwd=WORKSPACE)
    if applied.exit_code != 0:
        raise RuntimeError(f"the solution of {task.id} does not apply: {applied.stderr.strip()[:300]}")


def _graded_run(
    backend: DockerBackend, task: Task, settings: ServerSettings, cache: PristineCache
) -> tuple[float, float]:
    """(seconds, reward) of grading the task's own solution, every defence on, containers started cold."""
    limits = SandboxSettings().limits()
    agent = seed(task, backend.create(task.record.image, limits=limits))
    try:
        _apply_solution(agent, task)
        started = time.perf_counter()
        details = grade(
            task,
            agent,
            lambda: seed(task, backend.create(task.record.image, limits=limits)),
            cache,
            settings.grade_limits(),
        )
        return time.perf_counter() - started, details.reward
    finally:
        agent.destroy()


def paired_ratio(bare: list[float], graded: list[float]) -> float:
    """Grading's time over bare pytest's on the same tasks, all taken together. A median of each side would pair one
    task's grading with another's bare run."""
    return sum(graded) / sum(bare)


def run_grade_bench(tasks_dir: Path, repetitions: int, max_tasks: int) -> dict:
    """Median bare and graded seconds per task, their ratio over all tasks measured, and the worst task's."""
    backend = DockerBackend()
    settings = ServerSettings(tasks_dir=tasks_dir)
    store = TaskStore(tasks_dir)
    cache = PristineCache()
    rows, bare_all, graded_all = [], [], []
    for task in sorted(store.tasks.values(), key=lambda t: t.id)[:max_tasks]:
        _graded_run(backend, task, settings, cache)  # warms the pristine cache, as a running server has it
        bare = [_bare_run(backend, task, settings.grade_timeout_s) for _ in range(repetitions)]
        graded = [_graded_run(backend, task, settings, cache) for _ in range(repetitions)]
        rewards = sorted({reward for _, reward in graded})
        bare_s, graded_s = statistics.median(bare), statistics.median(seconds for seconds, _ in graded)
        bare_all.append(bare_s)
        graded_all.append(graded_s)
        rows.append(
            {
                "task": task.id,
                "bare_pytest_s": round(bare_s, 3),
                "grade_s": round(graded_s, 3),
                "ratio": round(graded_s / bare_s, 3),
                "oracle_rewards": rewards,
                "tests": len(task.record.FAIL_TO_PASS) + len(task.record.PASS_TO_PASS),
            }
        )
    if not rows:
        raise ValueError(f"{tasks_dir} holds no task to grade: give a store made by `regrow synth`")
    return {
        "tasks": rows,
        "repetitions": repetitions,
        "bare_pytest_s": round(statistics.median(bare_all), 3),
        "grade_s": round(statistics.median(graded_all), 3),
        "grade_vs_bare_pytest": round(paired_ratio(bare_all, graded_all), 3),
        "worst_task_ratio": round(max(graded / bare for bare, graded in zip(bare_all, graded_all, strict=True)), 3),
        "defences": [
            "archive change set",
            "path policy",
            "safe path",
            "no plugin autoload",
            "root-owned tests and grader files",
            "signed launcher report",
            "out-of-process checks, a channel a call, judged unit by unit",
            "end-of-run record required",
            "static scan (flags)",
        ],
    }
