"""How bytes move between a client, the Docker socket proxy and the engine: one request in, one answer out."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11

_CHUNK = 64 * 1024
_FORWARDED_HEADERS = (b"content-type", b"user-agent", b"accept")
_LINGER_S = 2.0  # drain what a refused client still sends, so it reads our answer instead of a reset
_ENGINE_REPLY_LIMIT = 16 * 1024 * 1024


class EngineDown(Exception):
    """The engine could not be reached or answered nonsense; the client gets a 502."""


@dataclass(frozen=True)
class Answer:
    """A reply the proxy makes itself."""

    status: int
    payload: dict


def upstream_request(
    method: str, target: str, body: bytes, client_headers: Iterable[tuple[bytes, bytes]], upgrade: bool
) -> bytes:
    """The request re-framed by the proxy: its own length, `Connection: close` (or the exec upgrade), few headers."""
    lines = [f"{method} {target} HTTP/1.1", "Host: docker"]
    lines += [
        f"{name.decode()}: {value.decode('latin-1')}" for name, value in client_headers if name in _FORWARDED_HEADERS
    ]
    lines += ["Connection: Upgrade", "Upgrade: tcp"] if upgrade else ["Connection: close"]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
    """The next h11 event of a client, reading as needed; raises h11.RemoteProtocolError on bad HTTP."""
    while (event := conn.next_event()) is h11.NEED_DATA:
        conn.receive_data(await reader.read(_CHUNK))
    return event


async def read_response(reader: asyncio.StreamReader, method: str, initial: bytes = b"") -> tuple[int, bytes, bytes]:
    """(status, raw bytes, body) of one whole engine response, read up to its end as its framing says."""
    parser = h11.Connection(h11.CLIENT)
    parser.send(h11.Request(method=method, target="/", headers=[("Host", "docker")]))
    parser.send(h11.EndOfMessage())
    raw, body, status = bytearray(initial), bytearray(), 0
    if initial:
        parser.receive_data(initial)
    try:
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                chunk = await reader.read(_CHUNK)
                raw += chunk
                if len(raw) > _ENGINE_REPLY_LIMIT:
                    raise EngineDown(
                        f"regrow docker proxy: an engine reply to {method} is over {_ENGINE_REPLY_LIMIT} bytes"
                    )
                parser.receive_data(chunk)
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return status, bytes(raw), bytes(body)
    except h11.RemoteProtocolError as error:
        raise EngineDown(f"regrow docker proxy: the engine's reply to {method} is not valid HTTP ({error})") from None


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while chunk := await source.read(_CHUNK):
        sink.write(chunk)
        await sink.drain()


async def _until_eof(reader: asyncio.StreamReader) -> None:
    """Read and drop bytes until EOF: whatever a client sends after its one request is never forwarded."""
    while await reader.read(_CHUNK):
        pass


async def _first_of(*coroutines: Coroutine[Any, Any, object]) -> None:
    """Run the coroutines until the first one ends; cancel and await the rest, so no task outlives the call."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        if not task.cancelled() and isinstance(task.exception(), Exception):
            raise task.exception()  # type: ignore[misc]


async def relay_until_done(
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Relay the engine's answer; a client that hangs up meanwhile ends the upstream request too (say, a wait)."""

    async def end_upstream_with_client() -> None:
        try:
            await _until_eof(reader)
        finally:
            upstream_writer.close()  # the relay then reads EOF

    watcher = asyncio.create_task(end_upstream_with_client())
    try:
        await _pipe(upstream_reader, writer)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


async def relay_upgrade(
    client: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    """Relay an exec start: on 101 pipe raw bytes both ways; any other answer is relayed as one response."""
    head = bytearray()
    while b"\r\n\r\n" not in head and len(head) < _CHUNK and (chunk := await upstream_reader.read(_CHUNK)):
        head += chunk
    if not head.startswith((b"HTTP/1.1 101 ", b"HTTP/1.0 101 ")):
        _, raw, _ = await read_response(upstream_reader, "POST", bytes(head))
        writer.write(raw)
        await writer.drain()
        return
    end = head.index(b"\r\n\r\n") + 4 if b"\r\n\r\n" in head else len(head)
    writer.write(head[:end])
    await writer.drain()  # the head alone first, as the engine sends it: docker-py reads the stream from the raw socket
    writer.write(head[end:])
    pending, _ = client.trailing_data  # stream bytes the client sent right behind its request
    upstream_writer.write(pending)

    async def client_to_engine() -> None:
        await _pipe(reader, upstream_writer)
        if upstream_writer.can_write_eof():
            upstream_writer.write_eof()
        await asyncio.Event().wait()  # a half-closed client still gets the rest of the stream

    await _first_of(_pipe(upstream_reader, writer), client_to_engine())


async def answer(writer: asyncio.StreamWriter, method: str, reply: Answer) -> None:
    """Send the proxy's own JSON reply; `message` is what docker-py shows in its APIError."""
    body = json.dumps(reply.payload).encode()
    head = (
        f"HTTP/1.1 {reply.status} {HTTPStatus(reply.status).phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + (b"" if method == "HEAD" else body))
    await writer.drain()


async def linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Half-close and drop what the client still sends for a moment, so closing does not reset its read."""
    if writer.can_write_eof():
        writer.write_eof()
    with contextlib.suppress(TimeoutError, ConnectionError):
        await asyncio.wait_for(_until_eof(reader), _LINGER_S)
