"""The rollout stream survives env faults: servers that die and come back, lost episodes, full servers, deadlines.

Servers that the tests kill run the scripted env as a process (`python -m tests.trainer_client.scripted_env`),
killed with SIGKILL and restarted on the same port. Every wait is a poll with a deadline.
"""

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from websockets.sync.client import connect

from proto import ToolCall
from tests.live_process import free_port, wait_healthy
from tests.trainer_client.conftest import ScriptedSampler
from tests.trainer_client.scripted_env import ScriptedCodingEnv, serve_scripted_env
from trainer_client.env.client import EnvClient
from trainer_client.env.errors import EnvEpisodeLost, EnvRequestError, EnvTransportError
from trainer_client.rollout.agent_loop import EpisodeLimits
from trainer_client.rollout.stream import RolloutStream
from trainer_client.rollout.stream_settings import EnvRetries, StreamSettings

REPO = Path(__file__).resolve().parents[2]
SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
LOSE = '<tool_call>\n{"name": "run", "arguments": {"command": "lose-sandbox"}}\n</tool_call>'


class ScriptedEnvProcess:
    """The scripted env in its own process on a fixed port, so that it can be killed and started again."""

    def __init__(self, log_dir: Path, max_sessions: int = 8):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log_dir / f"scripted-env-{self.port}.log"
        self._max_sessions = max_sessions
        self._process: subprocess.Popen | None = None

    def launch(self) -> "ScriptedEnvProcess":
        command = [sys.executable, "-m", "tests.trainer_client.scripted_env", "--port", str(self.port)]
        with self._log.open("ab") as log:
            self._process = subprocess.Popen(
                [*command, "--max-sessions", str(self._max_sessions)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def wait_healthy(self) -> "ScriptedEnvProcess":
        assert self._process is not None
        wait_healthy(self.url, self._process, timeout_s=120)  # importing openenv alone takes seconds when loaded
        return self

    def start(self) -> "ScriptedEnvProcess":
        return self.launch().wait_healthy()

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=30)


@contextlib.contextmanager
def scripted_env_processes(tmp_path: Path, count: int) -> Iterator[list[ScriptedEnvProcess]]:
    """`count` scripted env processes, started side by side."""
    servers = [ScriptedEnvProcess(tmp_path).launch() for _ in range(count)]
    try:
        yield [server.wait_healthy() for server in servers]
    finally:
        for server in servers:
            server.kill()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.05)


def tasks() -> Iterator[dict]:
    return iter([{"task_id": f"task-{n}"} for n in range(1000)])


def fast_stream(urls, sampler, episode_tokens, playing: dict | None = None, **retries) -> RolloutStream:
    """A stream that backs off briefly and reads health often, so that faults resolve in a second or two; `playing`
    and `retries` override its StreamSettings and EnvRetries."""
    settings = StreamSettings(**{"workers": 2, "group_size": 2, **(playing or {})})
    faults = EnvRetries(**{"backoff_max_s": 0.5, "health_interval_s": 0.2, "outage_s": 120.0, **retries})
    return RolloutStream(urls, sampler, episode_tokens, EpisodeLimits(), tasks(), settings, faults)


def test_workers_back_off_while_the_server_is_down_and_reconnect_when_it_is_back(tmp_path, tokenizer, episode_tokens):
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [SUBMIT] * 1000)
    with scripted_env_processes(tmp_path, 1) as (server,):
        stream = fast_stream(server.url, sampler, episode_tokens, playing={"max_buffered_groups": 1})
        with stream:
            stream.next_groups(1, policy_version=0, timeout=120)
            server.kill()

            def restart_once_the_workers_wait() -> None:
                wait_for(lambda: stream.stats.unavailable_waits >= 3, "workers meeting the dead server")
                server.start()

            restarter = threading.Thread(target=restart_once_the_workers_wait)
            restarter.start()
            groups = stream.next_groups(2, policy_version=0, timeout=120)  # one at most was buffered before the kill
            restarter.join()

    assert len(groups) == 2 and all(len(group) == 2 and all(t.done for t in group) for group in groups)
    assert stream.stats.unavailable_waits >= 3 and stream.stats.backoff_s > 0


def test_an_episode_the_env_lost_is_replayed_and_counted_not_learned_as_reward_0(
    scripted_env_url, tokenizer, episode_tokens
):
    # one worker plays the turns in order: the first episode loses its sandbox, its replay submits
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [LOSE] + [SUBMIT] * 100)
    stream = fast_stream(scripted_env_url, sampler, episode_tokens, playing={"workers": 1})
    with stream:
        (group,) = stream.next_groups(1, policy_version=0, timeout=120)

    assert stream.stats.episode_retries == 1
    assert all(
        t.stop_reason == "done" and not any("sandbox died" in (turn.feedback or "") for turn in t.turns) for t in group
    )


def test_a_group_whose_episode_is_lost_past_the_retries_is_dropped_and_counted(
    scripted_env_url, tokenizer, episode_tokens
):
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [LOSE] * 3 + [SUBMIT] * 100)
    stream = fast_stream(scripted_env_url, sampler, episode_tokens, playing={"workers": 1}, episode_retries=2)
    with stream:
        (group,) = stream.next_groups(1, policy_version=0, timeout=120)

    assert {t.reset_options["task_id"] for t in group} == {"task-1"}  # task-0's group never reached the trainer
    assert stream.stats.groups_dropped_lost == 1 and stream.stats.episode_retries == 2


@contextlib.contextmanager
def a_held_session(url: str) -> Iterator[None]:
    """Take one session slot of the server with a reset episode on a WebSocket; free it on exit."""
    with connect(url.replace("http://", "ws://") + "/ws") as socket:
        socket.send(json.dumps({"type": "reset", "data": {"task_id": "held"}}))
        assert json.loads(socket.recv(timeout=30))["type"] == "observation"
        yield


def test_capacity_reached_is_met_with_backoff_until_a_slot_frees(tokenizer, episode_tokens):
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [SUBMIT] * 100)
    with serve_scripted_env(max_sessions=1) as url:
        stream = fast_stream(url, sampler, episode_tokens, playing={"workers": 1})
        held = contextlib.ExitStack()
        held.enter_context(a_held_session(url))  # before the stream starts, so that the test has the only slot
        with held, stream:
            wait_for(lambda: stream.stats.capacity_waits >= 3, "workers meeting a full server")
            held.close()  # free the slot; the stream runs on
            (group,) = stream.next_groups(1, policy_version=0, timeout=120)

    assert len(group) == 2 and all(t.done for t in group)
    assert stream.stats.backoff_s > 0


def test_a_reset_refused_for_want_of_an_episode_slot_is_waited_out(tokenizer, episode_tokens):
    """The real env counts episodes apart from sessions, so a reset on an open socket can meet CAPACITY_REACHED; over
    OpenEnv's transport it comes as EXECUTION_ERROR with our code leading the message, and is waited out alike."""
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [SUBMIT] * 100)
    ScriptedCodingEnv.busy_resets = 3
    with serve_scripted_env() as url:
        stream = fast_stream(url, sampler, episode_tokens, playing={"workers": 1})
        with stream:
            (group,) = stream.next_groups(1, policy_version=0, timeout=120)

    assert len(group) == 2 and all(t.done for t in group)
    assert (stream.stats.capacity_waits, ScriptedCodingEnv.busy_resets) == (3, 0)


def test_next_groups_gives_up_at_its_deadline_and_names_each_servers_state(tokenizer, episode_tokens):
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [SUBMIT] * 100)
    with serve_scripted_env(max_sessions=1) as url:
        stream = fast_stream(url, sampler, episode_tokens, playing={"workers": 1})
        with a_held_session(url), stream:
            wait_for(lambda: stream.stats.capacity_waits >= 1, "a worker meeting the full server")
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=rf"0 of 1 rollout groups .*{url}: healthy.*capacity waits"):
                stream.next_groups(1, policy_version=0, timeout=1.0)
            waited = time.monotonic() - started

    assert waited < 30  # the deadline, not the workers' backoff, ends the wait


def test_no_server_for_the_outage_window_fails_with_each_servers_state(tmp_path, tokenizer, episode_tokens):
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [SUBMIT] * 100)
    dead = f"http://127.0.0.1:{free_port()}"
    stream = fast_stream(dead, sampler, episode_tokens, outage_s=1.0)
    with stream, pytest.raises(Exception, match=rf"no env server could start an episode .*{dead}: down"):
        stream.next_groups(1, policy_version=0, timeout=120)


def test_traffic_leaves_a_killed_server_and_comes_back_when_it_restarts(tmp_path, tokenizer, episode_tokens):
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [SUBMIT] * 10_000)
    with scripted_env_processes(tmp_path, 2) as (a, b):
        stream = fast_stream([a.url, b.url], sampler, episode_tokens)
        with stream:

            def started(url: str) -> int:
                assert stream.env is not None
                return stream.env.pool.servers[url].started

            def play_until(condition: Callable[[], bool], what: str) -> None:
                deadline = time.monotonic() + 120
                while not condition():
                    assert time.monotonic() < deadline, what
                    stream.next_groups(1, policy_version=0, timeout=120)

            play_until(lambda: started(a.url) > 0 and started(b.url) > 0, "both servers playing")
            a.kill()
            wait_for(lambda: stream.env is not None and not stream.env.pool.servers[a.url].healthy, "A marked down")
            on_a, on_b = started(a.url), started(b.url)
            play_until(lambda: started(b.url) >= on_b + 8, "B taking the episodes")
            assert started(a.url) == on_a  # nothing started on the dead server
            a.start()
            play_until(lambda: started(a.url) > on_a, "A taken back")


def test_a_request_the_env_cannot_serve_stops_the_stream_at_once(scripted_env_url, tokenizer, episode_tokens):
    sampler = ScriptedSampler(tokenizer, episode_tokens.end_of_turn_id, [SUBMIT] * 100)
    stream = RolloutStream(
        scripted_env_url,
        sampler,
        episode_tokens,
        EpisodeLimits(),
        iter([{"task_id": "no-such-task"}]),
        StreamSettings(1),
    )
    with stream, pytest.raises(EnvRequestError, match=r"rejected 'reset' \[EXECUTION_ERROR\]: unknown task"):
        stream.next_groups(1, policy_version=0, timeout=120)
    assert (stream.stats.episode_retries, stream.stats.backoff_s) == (0, 0.0)  # neither replayed nor waited for


async def wait_until_answered(command: str) -> None:
    """Until the scripted env has answered `command`: its reply is then on its way to the client."""
    deadline = time.monotonic() + 30
    while command not in ScriptedCodingEnv.finished_commands:
        assert time.monotonic() < deadline, f"the env never answered {command!r}"
        await asyncio.sleep(0.05)


async def assert_each_reply_answers_its_own_request(client: EnvClient) -> None:
    async with client.episode(task_id="calc") as episode:
        assert episode.first.problem_statement  # a reset observation, not a stale step reply
        for word in ("one", "two", "three"):
            reply = await episode.step(ToolCall(tool="run", args={"command": f"echo {word}"}))
            assert reply.output == f"ran echo {word}"


async def test_a_late_reply_never_answers_a_later_request(scripted_env_url):
    client = EnvClient(scripted_env_url, max_connections=1, request_timeout=0.5)
    with pytest.raises(EnvTransportError, match="is broken; start a fresh episode"):
        async with client.episode(task_id="calc") as episode:
            with pytest.raises(EnvTransportError, match="no reply to 'step'"):
                await episode.step(ToolCall(tool="run", args={"command": "sleep 1.2"}))
            await wait_until_answered("sleep 1.2")
            await episode.step(ToolCall(tool="run", args={"command": "echo refused"}))  # the connection is broken
    await assert_each_reply_answers_its_own_request(client)
    await client.aclose()


async def test_a_step_the_caller_timed_out_leaves_no_reply_for_the_next_request(scripted_env_url):
    client = EnvClient(scripted_env_url, max_connections=1)
    async with client.episode(task_id="calc") as episode:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):  # the caller's own deadline, not the client's request timeout
                await episode.step(ToolCall(tool="run", args={"command": "sleep 1.1"}))
        await wait_until_answered("sleep 1.1")
        with pytest.raises(EnvTransportError, match="is broken"):  # it would have read "ran sleep 1.1"
            await episode.step(ToolCall(tool="run", args={"command": "echo shifted"}))
    await assert_each_reply_answers_its_own_request(client)
    await client.aclose()


async def test_a_lost_sandbox_is_its_own_error_not_an_observation(scripted_env_url):
    client = EnvClient(scripted_env_url, max_connections=1)
    with pytest.raises(EnvEpisodeLost, match=r"lost the episode \[SANDBOX_GONE\]"):
        async with client.episode(task_id="calc") as episode:
            await episode.step(ToolCall(tool="run", args={"command": "lose-sandbox"}))
    await client.aclose()
