"""`regrow bench server`: step overhead of /ws and gRPC over a direct exec, warm reset, concurrent episodes."""

from __future__ import annotations

import json
import random
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from websockets.sync.client import connect

from env_server.lifecycle.provisioning import seed
from env_server.server import start_in_background
from env_server.settings import ServerSettings
from env_server.task_store import TaskStore
from proto import coding_env_pb2 as pb
from proto import coding_env_pb2_grpc as pb_grpc
from sandbox import DockerBackend


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000, 2),
    }


class _Socket:
    """One /ws episode, frame by frame."""

    def __init__(self, http_url: str):
        self.ws = connect(http_url.replace("http://", "ws://") + "/ws", max_size=None).__enter__()

    def send(self, frame: dict) -> dict:
        self.ws.send(json.dumps(frame))
        reply = json.loads(self.ws.recv(timeout=600))
        if reply["type"] == "error":
            raise RuntimeError(reply["data"]["message"])
        return reply["data"]

    def step(self, tool: str, **args) -> dict:
        return self.send({"type": "step", "data": {"tool": tool, "args": args}})

    def close(self) -> None:
        self.ws.close()


def _load_episode(http_url: str, task_id: str, steps: int) -> tuple[int, int]:
    """One episode of `steps` steps and a submit; returns (steps done, errors)."""
    errors = done = 0
    socket = _Socket(http_url)
    try:
        socket.send({"type": "reset", "data": {"task_id": task_id}})
        plan = [("run", {"command": "true"}), ("read_file", {"path": "pyproject.toml"}), ("list_dir", {})]
        for index in range(steps):
            tool, args = plan[index % len(plan)]
            observation = socket.step(tool, **args)["observation"]
            errors += observation["feedback"] is not None
            done += 1
        final = socket.step("submit")
        errors += not final["done"]
        done += 1
    except Exception:  # a failed episode counts once and the load test goes on
        errors += 1
    finally:
        socket.close()
    return done, errors


def widened_store(source: Path, destination: Path, size: int) -> int:
    """Copy the store to `destination` with at least `size` tasks: each task beyond the store's own is a copy of one of
    them under a new id (its archives linked, not copied). Returns how many distinct tasks the store had."""
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("*.sqlite*", "workspaces"), dirs_exist_ok=True)
    # Every archive of the store, its tasks' twins' too, linked as it is: a twin's archive is named by the twin's id.
    for archive_path in sorted((source / "workspaces").glob("*")):
        (destination / "workspaces").mkdir(parents=True, exist_ok=True)
        (destination / "workspaces" / archive_path.name).hardlink_to(archive_path)
    records = [task.record for task in TaskStore(source).tasks.values()]
    lines = []
    for index in range(max(size, len(records))):
        record = records[index % len(records)]
        duplicate = index >= len(records)
        copy = record.model_copy(update={"instance_id": f"{record.instance_id}__copy{index}"}) if duplicate else record
        if record.workspace_archive:
            archive = f"workspaces/{copy.instance_id}.tar.gz"
            if duplicate:
                (destination / archive).hardlink_to(source / record.workspace_archive)
                copy = copy.model_copy(update={"workspace_archive": archive})
        if duplicate:
            shutil.copytree(source / "hidden" / record.instance_id, destination / "hidden" / copy.instance_id)
        lines.append(copy.model_dump_json() + "\n")
    (destination / "tasks.jsonl").write_text("".join(lines))
    return len(records)


def run_server_bench(tasks: Path, repetitions: int, episodes: int, steps: int, store_size: int = 50) -> dict:
    """Start a server on free ports over `tasks` widened to `store_size` tasks, measure, stop it; returns the
    numbers."""
    with tempfile.TemporaryDirectory(prefix="regrow-bench-store-") as scratch:
        distinct = widened_store(Path(tasks), Path(scratch), store_size)
        result = _measure(Path(scratch), repetitions, episodes, steps)
    result["store"] = {"tasks": max(store_size, distinct), "distinct_tasks": distinct}
    return result


def _cold_creates(backend: DockerBackend, image: str, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        sandbox = backend.create(image)
        samples.append(time.perf_counter() - started)
        sandbox.destroy()
    return samples


def _measure(tasks: Path, repetitions: int, episodes: int, steps: int) -> dict:
    store = TaskStore(tasks)
    task = next(iter(store.tasks.values()))
    backend = DockerBackend()
    settings = ServerSettings(
        tasks_dir=tasks,
        trace_db=Path(tasks) / "bench-traces.sqlite",
        port=0,
        grpc_port=0,
        max_episodes=episodes + 4,
        warm_pool_per_image=4,
        warm_pool_total=4,
    )
    result: dict = {"task": task.id, "repetitions": repetitions}
    with (
        start_in_background(settings, backend) as server,
        seed(task, backend.create(task.record.image)) as sandbox,
        grpc.insecure_channel(server.grpc_target) as channel,
    ):
        socket = _Socket(server.http_url)
        socket.send({"type": "reset", "data": {"task_id": task.id}})
        tracked = _Socket(server.http_url)  # its commands' effects on the workspace are recorded (prefix resets)
        tracked.send({"type": "reset", "data": {"task_id": task.id, "track_effects": True}})
        stub = pb_grpc.CodingEnvStub(channel)
        episode = stub.Reset(pb.ResetRequest(task_id=task.id)).episode_id
        action = pb.ToolCall(tool="run", args_json='{"command": "true"}')
        paths = {
            "direct_exec": lambda: sandbox.exec("true"),
            "ws_step": lambda: socket.step("run", command="true"),
            "grpc_step": lambda: stub.Step(pb.StepRequest(episode_id=episode, action=action)),
            "ws_step_tracked": lambda: tracked.step("run", command="true"),
        }
        # Interleaved, so that all three paths see the same load on the machine.
        samples: dict[str, list[float]] = {name: [] for name in paths}
        for call in paths.values():
            call()  # warm-up
        for _ in range(repetitions):
            for name, call in paths.items():
                started = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - started)
        socket.close()
        tracked.close()
        stub.Close(pb.EpisodeRef(episode_id=episode))
        for name, values in samples.items():
            result[name] = _ms(values)
        direct = statistics.median(samples["direct_exec"])
        result["ws_overhead"] = round(statistics.median(samples["ws_step"]) / direct, 3)
        result["grpc_overhead"] = round(statistics.median(samples["grpc_step"]) / direct, 3)
        result["ws_tracked_overhead"] = round(statistics.median(samples["ws_step_tracked"]) / direct, 3)

        # Resets of tasks drawn from the whole store, each from a full pool, against creating a container cold.
        # The reset answers before the task's own files are written; the first step waits for them, so the time to a
        # usable workspace is reported too (the reset plus a `run true`).
        resets, usable, chosen = [], [], random.Random(0)
        ids = sorted(store.tasks)
        for _ in range(min(repetitions, 20)):
            server.runtime.wait_warm(120)
            socket = _Socket(server.http_url)
            started = time.perf_counter()
            socket.send({"type": "reset", "data": {"task_id": chosen.choice(ids)}})
            resets.append(time.perf_counter() - started)
            socket.step("run", command="true")
            usable.append(time.perf_counter() - started)
            socket.close()
        result["warm_reset"] = _ms(resets)
        result["warm_reset_to_first_step"] = _ms(usable)
        cold = _cold_creates(backend, task.record.image, min(repetitions, 10))
        result["cold_create"] = _ms(cold)
        result["reset_vs_cold_create"] = round(statistics.median(resets) / statistics.median(cold), 3)

        server.runtime.wait_warm(120)
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=episodes) as pool:
            outcomes = list(pool.map(lambda _: _load_episode(server.http_url, task.id, steps), range(episodes)))
        wall = time.perf_counter() - started
        result["load"] = {
            "episodes": episodes,
            "steps_per_episode": steps + 1,
            "errors": sum(e for _, e in outcomes),
            "steps_done": sum(d for d, _ in outcomes),
            "wall_s": round(wall, 2),
            "steps_per_s": round(sum(d for d, _ in outcomes) / wall, 2),
        }
    result["targets_met"] = (
        result["ws_overhead"] <= 1.1
        and result["grpc_overhead"] <= 1.1
        and result["load"]["errors"] == 0
        and result["reset_vs_cold_create"] <= 0.25
    )
    return result
