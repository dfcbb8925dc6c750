"""The routes of the dashboard and the episode viewer, added to the env server's app."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from enum import Enum
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from env_server.dashboard.access import SECURITY_HEADERS, PageAccess
from env_server.dashboard.episode_view import episode_view
from env_server.dashboard.snapshot import SnapshotCache
from env_server.lifecycle.runtime import EpisodeRuntime

HERE = Path(__file__).parent
# An open event stream ends after this long and the browser reconnects: no page holds a connection forever, and a
# server that is shutting down waits for none.
STREAM_LIFETIME_S = 120.0


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def _reward(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S")


def add_dashboard(app: FastAPI, runtime: EpisodeRuntime) -> None:
    """Serve /dashboard, /dashboard/events, /dashboard/snapshot, /dashboard/static and /episodes/{id}/view."""
    pages = DashboardPages(runtime)
    app.mount("/dashboard/static", StaticFiles(directory=HERE / "static"), name="dashboard-static")
    html, tags = HTMLResponse, list[str | Enum](["Dashboard"])
    app.add_api_route(
        "/dashboard", pages.dashboard, tags=tags, summary="The live dashboard (HTML)", response_class=html
    )
    app.add_api_route(
        "/dashboard/snapshot", pages.snapshot_json, tags=tags, summary="What the dashboard shows now, as JSON"
    )
    app.add_api_route(
        "/dashboard/events", pages.events, tags=tags, summary="Server-sent events: one snapshot per refresh"
    )
    view_summary = "One episode, to read (HTML)"
    app.add_api_route(
        "/episodes/{episode_id}/view", pages.view_episode, tags=tags, summary=view_summary, response_class=html
    )


class DashboardPages:
    """The dashboard's routes, one method each, and what they share: the sign-in gate, the snapshot cache, the
    templates."""

    def __init__(self, runtime: EpisodeRuntime) -> None:
        self.runtime, self.settings = runtime, runtime.settings
        self.access = PageAccess(self.settings.api_token)
        self.snapshots = SnapshotCache(runtime, self.settings.dashboard_refresh_s)
        self.templates = Jinja2Templates(directory=HERE / "templates")
        self.templates.env.filters.update(seconds=_seconds, reward=_reward, when=_when)

    def page(self, request: Request, template: str, status: int = 200, **context: object) -> HTMLResponse:
        response = self.templates.TemplateResponse(request, template, context, status_code=status)
        response.headers.update(SECURITY_HEADERS)
        return response

    def gate(self, request: Request) -> Response | None:
        """None when the request may see the page; else the sign-in redirect or the sign-in page."""
        given = request.query_params.get("token")
        if given is not None and self.access.token_matches(given):
            return self.access.sign_in(request)
        if self.access.allowed(request):
            return None
        return self.page(request, "sign_in.html", status=401, wrong=given is not None)

    def demand(self, request: Request) -> None:
        if not self.access.allowed(request):
            raise HTTPException(401, "sign in at /dashboard?token=<REGROW_SERVER_API_TOKEN> or send a bearer token")

    async def dashboard(self, request: Request) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        snapshot, _ = await run_in_threadpool(self.snapshots.get)
        return self.page(request, "dashboard.html", snapshot=snapshot)

    async def snapshot_json(self, request: Request) -> Response:
        self.demand(request)
        _, body = await run_in_threadpool(self.snapshots.get)
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    async def events(self, request: Request) -> EventSourceResponse:
        self.demand(request)
        return EventSourceResponse(self._snapshot_events(), headers={"Cache-Control": "no-store"}, sep="\n")

    async def _snapshot_events(self) -> AsyncIterator[ServerSentEvent]:
        retry_ms = int(self.settings.dashboard_refresh_s * 2000)
        ends = time.monotonic() + STREAM_LIFETIME_S
        while time.monotonic() < ends and not self.runtime.stopping:
            _, body = await run_in_threadpool(self.snapshots.get)
            yield ServerSentEvent(body.decode() if isinstance(body, bytes) else body, event="snapshot", retry=retry_ms)
            await asyncio.sleep(self.settings.dashboard_refresh_s)

    async def view_episode(self, request: Request, episode_id: str) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        trace = await run_in_threadpool(self.runtime.traces.get_episode, episode_id)
        if trace is None:
            return self.page(request, "not_found.html", status=404, episode_id=episode_id)
        task = self.runtime.store.tasks.get(trace.task_id)
        show = self.settings.show_solutions
        view = episode_view(trace, task.record.solution_patch if task else None, show)
        return self.page(request, "episode.html", view=view, show_solutions=show)
