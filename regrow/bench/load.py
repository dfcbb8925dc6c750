"""`regrow bench load`: clients play whole episodes over /ws back to back, for hours if asked, against a live server.

It reports throughput, step latency per tool and errors by code, and what a leak would show: the server's resident
memory, open files and containers over time, and the containers left once the server has stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

from env_server.task_store import TaskStore
from regrow.bench.load_server import (
    LoadedServer,
    own_server,
    process_metrics,
    server_containers,
    twin_counts,
)
from regrow.bench.load_stats import MiB, Sample, latency_ms, rss_trend
from sandbox import DockerBackend, SandboxError
from sandbox.layout import WORKSPACE

log = logging.getLogger(__name__)

CAPACITY_REACHED = "CAPACITY_REACHED"
MAX_CLIENTS = 64
MAX_STEPS = 200
MAX_DURATION_S = 12 * 3600.0
REQUEST_TIMEOUT_S = 600.0  # a submit grades in a fresh container, which a loaded engine may take minutes to start
RETRY_S = 0.5
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
PROBE = "regrow_load_probe.txt"


@dataclass(frozen=True)
class LoadPlan:
    """What one load run does: `clients` episodes at a time, `steps` steps each (the last a submit), for
    `duration_s`; against its own `regrow serve` with `slots` episode slots (default one per client), or `url`."""

    tasks: Path
    clients: int
    steps: int
    duration_s: float
    url: str | None = None
    slots: int | None = None
    warmup_s: float = 300.0
    sample_every_s: float = 10.0
    split: str | None = None  # reset by seed and split, as a trainer samples (twins mixed in), not by task id

    def __post_init__(self) -> None:
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise ValueError(f"--episodes must be in [1, {MAX_CLIENTS}], got {self.clients}")
        if not 1 <= self.steps <= MAX_STEPS:
            raise ValueError(f"--steps must be in [1, {MAX_STEPS}], got {self.steps}")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"--duration must be in (0, {MAX_DURATION_S:.0f}] seconds, got {self.duration_s}")
        if self.url and urlsplit(self.url).hostname not in LOOPBACK_HOSTS:
            raise ValueError(f"--url {self.url} is not a loopback address: the load bench only runs against 127.0.0.1")


# --- the clients ----------------------------------------------------------------------------------------------------


@dataclass
class _Tally:
    """What every client saw, added up under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    step_s: dict[str, list[float]] = field(default_factory=dict)
    reset_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    capacity_reached: int = 0
    episodes: int = 0

    def step(self, tool: str, seconds: float) -> None:
        with self.lock:
            self.step_s.setdefault(tool, []).append(seconds)

    def error(self, code: str, message: str) -> None:
        with self.lock:
            self.errors[code] += 1
            self.examples.setdefault(code, message[:300])
        log.warning("load: %s: %s", code, message[:300])


class _Refused(Exception):
    """The server answered with an error frame, or the connection failed; `code` says which."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class _Session:
    """One /ws connection: one episode, a frame at a time."""

    def __init__(self, ws: ClientConnection):
        self.ws = ws

    def request(self, frame: dict[str, Any]) -> dict[str, Any]:
        with contextlib.suppress(ConnectionClosed):  # a refused session has already said why: read it below
            self.ws.send(json.dumps(frame))
        try:
            reply = json.loads(self.ws.recv(timeout=REQUEST_TIMEOUT_S))
        except TimeoutError as error:
            raise _Refused("TIMEOUT", f"no reply to {frame['type']} within {REQUEST_TIMEOUT_S:.0f} s") from error
        except (ConnectionClosed, OSError) as error:
            raise _Refused("CONNECTION_LOST", f"connection dropped during {frame['type']}: {error}") from error
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            raise _Refused(str(data.get("code") or "ERROR"), str(data.get("message")))
        return reply.get("data") or {}

    def close(self) -> None:
        with contextlib.suppress(ConnectionClosed, OSError):
            self.ws.send(json.dumps({"type": "close"}))


Check = Callable[[dict[str, Any]], bool]


def episode_plan(steps: int, token: str) -> list[tuple[str, dict[str, Any], Check]]:
    """`steps` tool calls that each have one right answer, the last a submit: a mix of `run` and the file tools."""
    edited = token[::-1]
    cycle: list[tuple[str, dict[str, Any], Check]] = [
        ("run", {"command": "realpath ."}, lambda obs: obs["output"] == f"{WORKSPACE}\n" and obs["exit_code"] == 0),
        ("write_file", {"path": PROBE, "content": f"{token}\n"}, lambda obs: True),
        ("read_file", {"path": PROBE}, lambda obs: obs["output"] == f"{token}\n"),
        ("edit_file", {"path": PROBE, "old": token, "new": edited}, lambda obs: True),
        ("list_dir", {}, lambda obs: PROBE in obs["output"].splitlines()),
        ("search", {"pattern": edited}, lambda obs: PROBE in obs["output"]),
        ("run", {"command": f"cat {PROBE}"}, lambda obs: obs["output"] == f"{edited}\n" and obs["exit_code"] == 0),
    ]
    return [cycle[index % len(cycle)] for index in range(steps - 1)] + [("submit", {}, lambda obs: True)]


def _play_episode(ws_url: str, task_id: str | dict, steps: int, token: str, tally: _Tally) -> bool:
    """One episode on a connection of its own; False when it could not be played to its end (no free slot, or a
    failure)."""
    try:
        with connect(ws_url, open_timeout=60, max_size=None) as ws:
            return _play(_Session(ws), task_id, steps, token, tally)
    except (OSError, InvalidHandshake) as error:
        tally.error("CONNECT_FAILED", f"cannot open {ws_url}: {error}")
        return False


def _play(session: _Session, task_id: str | dict, steps: int, token: str, tally: _Tally) -> bool:
    try:
        started = time.perf_counter()
        session.request({"type": "reset", "data": task_id if isinstance(task_id, dict) else {"task_id": task_id}})
        with tally.lock:
            tally.reset_s.append(time.perf_counter() - started)
        for tool, args, right in episode_plan(steps, token):
            started = time.perf_counter()
            reply = session.request({"type": "step", "data": {"tool": tool, "args": args}})
            tally.step(tool, time.perf_counter() - started)
            observation = reply.get("observation") or {}
            metadata = reply.get("metadata") or observation.get("metadata") or {}
            failure = metadata.get("tool_error")
            if failure:
                tally.error(str(failure), f"{tool} {args}: {observation.get('feedback')}")
            elif not right(observation):
                tally.error("WRONG_OUTPUT", f"{tool} {args} answered {observation}")
            if reply.get("done") and tool != "submit":
                if not failure:
                    tally.error("ENDED_EARLY", f"the episode ended at {tool} {args}: {observation.get('feedback')}")
                return False
        if not reply.get("done"):
            tally.error("NOT_DONE", f"submit did not end the episode: {reply}")
        with tally.lock:
            tally.episodes += 1
    except _Refused as refused:
        if refused.code == CAPACITY_REACHED:
            with tally.lock:
                tally.capacity_reached += 1
        else:
            tally.error(refused.code, str(refused))
        return False
    finally:
        session.close()
    return True


def _client(
    index: int, ws_url: str, task_ids: list[str], steps: int, end: float, tally: _Tally, split: str | None = None
) -> None:
    for played in range(sys.maxsize):
        if time.monotonic() >= end:
            return
        task: str | dict = task_ids[(index + played) % len(task_ids)]
        if split is not None:
            task = {"seed": random.getrandbits(31), "split": split}
        if not _play_episode(ws_url, task, steps, f"probe{index}x{played}", tally):
            time.sleep(RETRY_S)  # a full or failing server is asked again soon, not in a busy loop


# --- the server -----------------------------------------------------------------------------------------------------


def _sample(server: LoadedServer, backend: DockerBackend | None, started: float, tally: _Tally) -> Sample:
    rss, fds = process_metrics(server.url)
    containers = None
    if backend is not None:
        try:
            containers = len(server_containers(backend, server.owner_prefix))
        except SandboxError as error:
            log.warning("could not list containers: %s", error)
    return Sample(round(time.monotonic() - started, 1), tally.episodes, rss, fds, containers)


# --- the run --------------------------------------------------------------------------------------------------------


def run_load_bench(plan: LoadPlan, on_progress: Callable[[float, int], None] | None = None) -> dict[str, Any]:
    """Run `plan` and return its numbers; `on_progress(seconds elapsed, episodes done)` is called about every second."""
    task_ids = sorted(TaskStore(plan.tasks).tasks)
    try:
        backend: DockerBackend | None = DockerBackend()
    except SandboxError as error:
        log.warning("no container counts: %s", error)
        backend = None
    with tempfile.TemporaryDirectory(prefix="regrow-bench-load-") as scratch:
        if plan.url:
            server = LoadedServer(plan.url.rstrip("/"))
            result = _load(plan, server, task_ids, backend, on_progress)
        else:
            slots = plan.slots or plan.clients
            with own_server(plan.tasks, slots, Path(scratch), backend) as server:
                result = _load(plan, server, task_ids, backend, on_progress)
            if result["errors"]:
                result["server_log"] = server_warnings(Path(scratch) / "server.log")
    result["containers_left_after_stop"] = server.containers_left
    return result


def server_warnings(log_path: Path, keep: int = 40) -> list[str]:
    """The started server's log lines that say what went wrong or what it removed, the last `keep` of them: an
    error the clients saw is then traceable to the server's side (or shown not to be the server's doing)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError as error:
        return [f"the server's log could not be read: {error}"]
    wanted = ('"WARNING"', '"ERROR"', "reaping sandbox", "removing stopped sandbox")
    return [line for line in lines if any(mark in line for mark in wanted)][-keep:]


def _load(
    plan: LoadPlan,
    server: LoadedServer,
    task_ids: list[str],
    backend: DockerBackend | None,
    on_progress: Callable[[float, int], None] | None,
) -> dict[str, Any]:
    ws_url = server.url.replace("http://", "ws://", 1) + "/ws"
    tally = _Tally()
    started = time.monotonic()
    end = started + plan.duration_s
    clients = [
        threading.Thread(
            target=_client, args=(index, ws_url, task_ids, plan.steps, end, tally, plan.split), daemon=True
        )
        for index in range(plan.clients)
    ]
    for thread in clients:
        thread.start()
    samples = [_sample(server, backend, started, tally)]
    next_sample = started + plan.sample_every_s
    while alive := [thread for thread in clients if thread.is_alive()]:
        alive[0].join(timeout=1)
        if on_progress:
            on_progress(time.monotonic() - started, tally.episodes)
        if time.monotonic() >= next_sample:
            samples.append(_sample(server, backend, started, tally))
            next_sample += plan.sample_every_s
    wall = time.monotonic() - started
    samples.append(_sample(server, backend, started, tally))
    steps = [seconds for values in tally.step_s.values() for seconds in values]
    fds = [sample.open_fds for sample in samples if sample.open_fds is not None]
    return {
        "server": plan.url or "own",
        # Over --url the server's owner label is unknown, so every regrow container on the engine is counted.
        "containers_counted": "every regrow container on the engine" if server.owner_prefix is None else "the server's",
        "clients": plan.clients,
        "steps_per_episode": plan.steps,
        "duration_s": plan.duration_s,
        "wall_s": round(wall, 1),
        "episodes": tally.episodes,
        "steps": len(steps),
        "episodes_per_s": round(tally.episodes / wall, 3),
        "steps_per_s": round(len(steps) / wall, 2),
        "step_latency": {"all": latency_ms(steps)} | {t: latency_ms(v) for t, v in sorted(tally.step_s.items())},
        "reset_latency": latency_ms(tally.reset_s),
        "errors": dict(tally.errors),
        "error_count": sum(tally.errors.values()),
        "error_examples": tally.examples,
        "capacity_reached": tally.capacity_reached,
        "twins": twin_counts(server.url),
        "rss": rss_trend(samples, plan.warmup_s),
        "open_fds": {"first": fds[0], "last": fds[-1], "max": max(fds)} if fds else None,
        "samples": [
            {
                "t_s": sample.t_s,
                "episodes": sample.episodes,
                "rss_mib": None if sample.rss_bytes is None else round(sample.rss_bytes / MiB, 1),
                "open_fds": sample.open_fds,
                "containers": sample.containers,
            }
            for sample in samples
        ],
    }
