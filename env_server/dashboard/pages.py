"""The routes of the dashboard and the episode viewer, added to the env server's app."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
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
    settings = runtime.settings
    access = PageAccess(settings.api_token)
    snapshots = SnapshotCache(runtime, settings.dashboard_refresh_s)
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters.update(seconds=_seconds, reward=_reward, when=_when)
    app.mount("/dashboard/static", StaticFiles(directory=HERE / "static"), name="dashboard-static")

    def page(request: Request, template: str, status: int = 200, **context: object) -> HTMLResponse:
        response = templates.TemplateResponse(request, template, context, status_code=status)
        response.headers.update(SECURITY_HEADERS)
        return response

    def gate(request: Request) -> Response | None:
        """None when the request may see the page; else the sign-in redirect or the sign-in page."""
        given = request.query_params.get("token")
        if given is not None and access.token_matches(given):
            return access.sign_in(request)
        if access.allowed(request):
            return None
        return page(request, "sign_in.html", status=401, wrong=given is not None)

    def demand(request: Request) -> None:
        if not access.allowed(request):
            raise HTTPException(401, "sign in at /dashboard?token=<REGROW_SERVER_API_TOKEN> or send a bearer token")

    @app.get("/dashboard", tags=["Dashboard"], summary="The live dashboard (HTML)", response_class=HTMLResponse)
    async def dashboard(request: Request) -> Response:
        if (refused := gate(request)) is not None:
            return refused
        snapshot, _ = await run_in_threadpool(snapshots.get)
        return page(request, "dashboard.html", snapshot=snapshot)

    @app.get("/dashboard/snapshot", tags=["Dashboard"], summary="What the dashboard shows now, as JSON")
    async def snapshot_json(request: Request) -> Response:
        demand(request)
        _, body = await run_in_threadpool(snapshots.get)
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    @app.get("/dashboard/events", tags=["Dashboard"], summary="Server-sent events: one snapshot per refresh")
    async def events(request: Request) -> EventSourceResponse:
        demand(request)

        async def stream() -> AsyncIterator[ServerSentEvent]:
            retry_ms = int(settings.dashboard_refresh_s * 2000)
            ends = time.monotonic() + STREAM_LIFETIME_S
            while time.monotonic() < ends and not runtime.stopping:
                _, body = await run_in_threadpool(snapshots.get)
                yield ServerSentEvent(
                    body.decode() if isinstance(body, bytes) else body, event="snapshot", retry=retry_ms
                )
                await asyncio.sleep(settings.dashboard_refresh_s)

        return EventSourceResponse(stream(), headers={"Cache-Control": "no-store"}, sep="\n")

    @app.get(
        "/episodes/{episode_id}/view",
        tags=["Dashboard"],
        summary="One episode, to read (HTML)",
        response_class=HTMLResponse,
    )
    async def view_episode(request: Request, episode_id: str) -> Response:
        if (refused := gate(request)) is not None:
            return refused
        trace = await run_in_threadpool(runtime.traces.get_episode, episode_id)
        if trace is None:
            return page(request, "not_found.html", status=404, episode_id=episode_id)
        task = runtime.store.tasks.get(trace.task_id)
        view = episode_view(trace, task.record.solution_patch if task else None, settings.show_solutions)
        return page(request, "episode.html", view=view, show_solutions=settings.show_solutions)
