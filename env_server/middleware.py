"""The ASGI middleware around the app: plain HTTP calls marked as per-request, and a /ws client's episode ended as
soon as the client disconnects, even mid-step."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from env_server.environment import PER_REQUEST
from env_server.lifecycle.runtime import EpisodeRuntime
from env_server.stepping.errors import EpisodeError

# Observations carry the episode id in their metadata; text from the sandbox is JSON-escaped, so it cannot forge this.
_EPISODE_ID = re.compile(r'"episode_id":\s*"([^"\\]+)"')


class MarkPerRequestCalls:
    """Tells the environment OpenEnv builds for a plain HTTP /reset or /step that it lives for one request."""

    def __init__(self, app: Callable[..., Awaitable[None]]):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        per_request = scope["type"] == "http" and scope["path"] in ("/reset", "/step")
        token = PER_REQUEST.set(per_request)
        try:
            await self.app(scope, receive, send)
        finally:
            PER_REQUEST.reset(token)


class AbortOnDisconnect:
    """OpenEnv's /ws handler notices a disconnect only at its next receive, after a running step finishes;
    this reads the socket's events eagerly and aborts the episode at once, destroying its sandbox."""

    def __init__(self, app: Callable[..., Awaitable[None]], runtime: EpisodeRuntime, path: str = "/ws"):
        self.app, self.runtime, self.path = app, runtime, path

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        # A socket attached to an HTTP MCP session (?session_id=) does not own it; that session's close ends it.
        attached = b"session_id=" in scope.get("query_string", b"")
        if scope["type"] != "websocket" or scope["path"] != self.path or attached:
            await self.app(scope, receive, send)
            return
        inbox: asyncio.Queue = asyncio.Queue()
        episode_id: list[str] = []

        async def pump() -> None:
            while True:
                message = await receive()
                await inbox.put(message)
                if message["type"] == "websocket.disconnect":
                    if episode_id:
                        await asyncio.to_thread(self._abort, episode_id[-1])
                    return

        async def watched_send(message: dict[str, Any]) -> None:
            text = message.get("text") if message["type"] == "websocket.send" else None
            if text and (found := _EPISODE_ID.search(text)):
                episode_id[:] = [found.group(1)]
            await send(message)

        reader = asyncio.create_task(pump())
        try:
            await self.app(scope, inbox.get, watched_send)
        finally:
            reader.cancel()

    def _abort(self, episode_id: str) -> None:
        try:
            episode = self.runtime.get(episode_id)
        except EpisodeError:
            return  # already over
        if not episode.addressable:
            self.runtime.abort(episode, "client disconnected")
