"""Runs the env server: one runtime, the HTTP/WebSocket app under uvicorn and the gRPC server, in one process."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import grpc
import uvicorn

from env_server.app import build_app
from env_server.grpc_server import start_grpc_server
from env_server.lifecycle.runtime import EpisodeRuntime
from env_server.settings import ServerSettings
from env_server.task_store import TaskStore
from env_server.traces.store import TraceStore
from sandbox import DockerBackend, SandboxBackend

log = logging.getLogger(__name__)

# How long a stop waits for open responses (a dashboard's event stream never ends by itself) before closing them.
GRACEFUL_SHUTDOWN_S = 5


def start_runtime(settings: ServerSettings, backend: SandboxBackend | None = None) -> EpisodeRuntime:
    store = TaskStore(settings.tasks_dir)
    return EpisodeRuntime(
        settings, store, backend or DockerBackend(wait_for_engine=True), TraceStore(settings.trace_path())
    ).start()


@dataclass
class RunningServer:
    """A server started in this process's background threads (tests and benchmarks)."""

    runtime: EpisodeRuntime
    http_url: str
    grpc_target: str
    _uvicorn: uvicorn.Server
    _thread: threading.Thread
    _grpc: grpc.Server

    def stop(self) -> None:
        self.runtime.drain()
        self._uvicorn.should_exit = True
        self._thread.join(timeout=30)
        self._grpc.stop(grace=2).wait()
        self.runtime.close()
        self.runtime.traces.close()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_background(settings: ServerSettings, backend: SandboxBackend | None = None) -> RunningServer:
    """Start runtime, app and gRPC on the configured (or, for port 0, free) ports; `stop()` undoes it all."""
    runtime = start_runtime(settings, backend)
    config = uvicorn.Config(
        build_app(runtime),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        ws_max_size=16 * 1024 * 1024,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            runtime.close()
            raise RuntimeError(f"the HTTP server did not start on {settings.host}:{settings.port}")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    grpc_server, grpc_port = start_grpc_server(runtime, settings.host, settings.grpc_port)
    return RunningServer(
        runtime, f"http://{settings.host}:{port}", f"{settings.host}:{grpc_port}", server, thread, grpc_server
    )


def serve(settings: ServerSettings) -> None:
    """Serve until SIGINT or SIGTERM, then destroy every container this server owns."""
    runtime = start_runtime(settings)
    grpc_server, grpc_port = start_grpc_server(runtime, settings.host, settings.grpc_port)
    log.info("gRPC on %s:%d; HTTP and WebSocket on %s:%d", settings.host, grpc_port, settings.host, settings.port)
    log.info("dashboard at http://%s:%d/dashboard", settings.host, settings.port)

    def shut_down() -> None:
        grpc_server.stop(grace=5).wait()
        runtime.close()

    app = build_app(runtime)
    # uvicorn re-raises SIGTERM/SIGINT once it has stopped, so the cleanup must run in its shutdown phase.
    app.router.on_shutdown.append(shut_down)
    try:
        # log_config=None: uvicorn's records go through the root handler, which writes JSON lines.
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level="info",
            log_config=None,
            ws_max_size=16 * 1024 * 1024,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
    finally:
        shut_down()
        runtime.traces.close()
