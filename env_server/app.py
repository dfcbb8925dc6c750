"""The HTTP and WebSocket app: OpenEnv's `create_app` around CodingEnvironment, plus regrow's own routes."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.types import ConcurrencyConfig

from env_server.dashboard.access import PageAccess
from env_server.dashboard.pages import add_dashboard
from env_server.environment import CodingEnvironment
from env_server.lifecycle.runtime import EpisodeRuntime
from env_server.middleware import AbortOnDisconnect, MarkPerRequestCalls
from env_server.stepping.errors import EpisodeError
from proto.actions import ToolCall
from proto.health import ServerHealth
from proto.observations import CodingObservation, EpisodeState
from proto.traces import EpisodeTrace

ENV_NAME = "regrow_coding"


def token_check(runtime: EpisodeRuntime):
    """A dependency that demands `Authorization: Bearer <REGROW_SERVER_API_TOKEN>` when a token is set."""
    access = PageAccess(runtime.settings.api_token)

    def check(request: Request) -> None:
        if not access.bearer_allowed(request):
            raise HTTPException(
                401,
                "this route needs `Authorization: Bearer <token>` with the server's REGROW_SERVER_API_TOKEN",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return check


def build_app(runtime: EpisodeRuntime) -> FastAPI:
    """OpenEnv's app for our environment, with /episodes, /metrics, the dashboard and typed episode errors added."""
    settings = runtime.settings
    app = create_app(
        partial(CodingEnvironment, runtime),
        ToolCall,
        CodingObservation,
        env_name=ENV_NAME,
        # OpenEnv reaps idle sessions only when given a timeout; the runtime also reaps idle episodes itself.
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=settings.max_episodes, session_timeout=settings.idle_timeout_s
        ),
        state_cls=EpisodeState,
        mode="simulation",
    )
    app.title = "regrow env server"
    app.add_middleware(AbortOnDisconnect, runtime=runtime)
    app.add_middleware(MarkPerRequestCalls)
    authorized = [Depends(token_check(runtime))]

    @app.exception_handler(EpisodeError)
    async def episode_error(request: Request, error: EpisodeError) -> JSONResponse:
        return JSONResponse(status_code=error.http_status, content={"detail": str(error), "code": error.code})

    # OpenEnv's /health always says healthy; ours answers from the engine watch, so it replaces that route.
    app.router.routes[:] = [route for route in app.router.routes if getattr(route, "path", None) != "/health"]

    @app.get(
        "/health",
        tags=["Health"],
        summary="Whether the server can start episodes: 200 healthy, 503 with the reason",
        response_model=ServerHealth,
        responses={503: {"model": ServerHealth}},
    )
    def health() -> JSONResponse:
        answer = runtime.health()
        return JSONResponse(answer.model_dump(mode="json"), status_code=200 if answer.status == "healthy" else 503)

    @app.get("/metrics", tags=["Operations"], summary="Prometheus metrics")
    def metrics() -> Response:
        return Response(runtime.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get(
        "/episodes", tags=["Traces"], dependencies=authorized, summary="Recorded episodes, newest first (without steps)"
    )
    def list_episodes(
        task_id: str | None = None,
        status: Literal["running", "submitted", "budget_exhausted", "aborted"] | None = None,
        min_reward: float | None = None,
        since: datetime | None = None,
        limit: int = Query(100, ge=1, le=1000),
        offset: int = Query(0, ge=0),
    ) -> list[EpisodeTrace]:
        return runtime.traces.list_episodes(task_id, status, min_reward, since, limit, offset)

    @app.get(
        "/episodes/{episode_id}",
        tags=["Traces"],
        dependencies=authorized,
        summary="One recorded episode with every step",
    )
    def get_episode(episode_id: str) -> EpisodeTrace:
        trace = runtime.traces.get_episode(episode_id)
        if trace is None:
            raise HTTPException(404, f"no episode {episode_id!r} in the trace store")
        return trace

    @app.delete(
        "/episodes/{episode_id}",
        tags=["Traces"],
        dependencies=authorized,
        summary="End a live addressable episode without grading",
    )
    def end_episode(episode_id: str) -> dict[str, str]:
        runtime.abort(runtime.get(episode_id), "ended by DELETE /episodes")
        return {"episode_id": episode_id, "status": "aborted"}

    add_dashboard(app, runtime)
    return app
