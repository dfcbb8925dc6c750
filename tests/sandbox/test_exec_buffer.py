"""Exec output that reaches the client together with the reply's headers is still read (docker-py issue #3332).

A loaded engine, or a proxy, may deliver the 101 reply of `exec start` and the command's first output frames in one
packet; docker-py's HTTP parser buffers all of it while it reads the headers. A relay here holds every engine reply for
a moment so that the headers and the frames always arrive together.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from sandbox import DockerBackend, DockerSandbox
from sandbox.settings import SandboxSettings

HOLD_S = 1.5


def _engine_address() -> tuple[int, str | tuple[str, int]]:
    """The socket family and address of the engine the tests use (its unix socket, or a tcp:// host)."""
    host = SandboxSettings().docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if host.startswith("unix://"):
        return socket.AF_UNIX, host.removeprefix("unix://")
    parts = urlsplit(host)
    if parts.scheme != "tcp" or not parts.hostname:
        pytest.skip(f"the relay test speaks plain HTTP to the engine, not to {host}")
    return socket.AF_INET, (parts.hostname, parts.port or 2375)


class HoldingRelay:
    """A TCP relay on 127.0.0.1 to the engine that holds each reply HOLD_S before passing it on."""

    def __init__(self, engine: tuple[int, str | tuple[str, int]]):
        self.engine = engine
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            family, address = self.engine
            engine = socket.socket(family, socket.SOCK_STREAM)
            engine.connect(address)
            asked = threading.Event()  # the client sent something: the engine's next bytes start a reply
            self._spawn(self._requests, client, engine, asked)
            self._spawn(self._replies, engine, client, asked)

    @staticmethod
    def _requests(client: socket.socket, engine: socket.socket, asked: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                asked.set()
                engine.sendall(data)
            engine.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    @staticmethod
    def _replies(engine: socket.socket, client: socket.socket, asked: threading.Event) -> None:
        try:
            while data := engine.recv(65536):
                if asked.is_set():
                    asked.clear()
                    data += HoldingRelay._held(engine, time.monotonic() + HOLD_S)
                client.sendall(data)
            client.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            engine.close()

    @staticmethod
    def _held(engine: socket.socket, until: float) -> bytes:
        held = b""
        while (remaining := until - time.monotonic()) > 0:
            engine.settimeout(remaining)
            try:
                data = engine.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            held += data
        engine.settimeout(None)
        return held

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def held_sandbox(docker_backend, sandbox) -> Iterator[DockerSandbox]:
    """The test's sandbox, reached through a relay that delivers each engine reply in one piece after HOLD_S."""
    relay = HoldingRelay(_engine_address())
    held = DockerBackend(base_url=relay.url, timeout=120)
    try:
        yield DockerSandbox(held.api, sandbox.id, sandbox.limits, sandbox.user, held.remove)
    finally:
        held.api.close()
        relay.close()


def test_output_that_arrives_with_the_reply_headers_is_kept(held_sandbox):
    for _ in range(3):
        result = held_sandbox.exec("realpath /workspace/.; echo oops >&2", timeout=60)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "/workspace\n", "oops\n")


def test_long_output_that_starts_with_the_reply_headers_is_whole(held_sandbox):
    # more than one buffer of the HTTP parser, so the rest comes from the socket after the buffered start
    result = held_sandbox.exec("seq 1 5000", timeout=60)
    assert result.exit_code == 0
    assert result.stdout == "".join(f"{n}\n" for n in range(1, 5001))


def test_an_oom_kill_is_reported_when_its_count_arrives_with_the_reply_headers(held_sandbox):
    # the kill count is read by an exec of its own, which lost its output just as a command's did
    result = held_sandbox.exec("python3 -c 'x = bytearray(1024 * 1024 * 1024); print(len(x))'", timeout=60)
    assert result.exit_code == 137
    assert result.oom_killed
