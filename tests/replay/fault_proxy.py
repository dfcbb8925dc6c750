"""A local HTTP proxy in front of a real OpenAI-compatible server that can fail or stall on purpose."""

import asyncio
import threading
from dataclasses import dataclass

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.live_process import free_port


@dataclass
class Faults:
    """What the proxy does to the next requests: answer some with an HTTP error, or stall each."""

    fail_first: int = 0
    fail_status: int = 503
    stall_s: float = 0.0
    drop_usage: bool = False  # strip the token counts from answers, as some servers never send them


class FaultProxy:
    """Forwards /v1/chat/completions to `upstream`, after the configured faults; counts requests."""

    def __init__(self, upstream: str, faults: Faults) -> None:
        self.upstream = upstream.rstrip("/")
        self.faults = faults
        self.requests = 0
        self.authorization: str | None = None
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    async def _chat(self, request: Request) -> Response:
        self.requests += 1
        self.authorization = request.headers.get("authorization")
        if self.requests <= self.faults.fail_first:
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=self.faults.fail_status)
        if self.faults.stall_s:
            await asyncio.sleep(self.faults.stall_s)
        async with httpx.AsyncClient(timeout=300) as client:
            answer = await client.post(
                f"{self.upstream}/chat/completions",
                content=await request.body(),
                headers={"content-type": "application/json"},
            )
        if self.faults.drop_usage and answer.status_code == 200:
            return JSONResponse({k: v for k, v in answer.json().items() if k != "usage"})
        return Response(answer.content, status_code=answer.status_code, media_type="application/json")

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"fault proxy could not start on port {self.port}")
            threading.Event().wait(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
