"""Fixtures of the env server tests: the hand-made task store and a live runtime on the real engine."""

import contextlib
from pathlib import Path

import pytest

from tests.task_fixture import build_demo_task_store


@pytest.fixture(scope="session")
def demo_task_store(docker_backend, base_image, tmp_path_factory) -> Path:
    """A one-task store (image built once per content hash)."""
    return build_demo_task_store(docker_backend, base_image, tmp_path_factory.mktemp("tasks"))


MINILIB = Path(__file__).parents[1] / "fixtures" / "minilib"
MINILIB_KINDS = ("function", "method", "class", "group")


@pytest.fixture(scope="session")
def minilib_kinds_store(docker_backend, base_image, tmp_path_factory) -> Path:
    """One stub task of each kind synthesized from minilib into one store (the repository image built once): the red
    team and the class-task tests share it, in one pytest process (`make test` runs both in its red-team lane)."""
    from task_synth.pipeline import synthesize
    from task_synth.settings import SynthSettings

    store = tmp_path_factory.mktemp("minilib-kinds-store")
    for kind in MINILIB_KINDS:
        settings = SynthSettings(modes=["stub"], kinds=[kind], max_tasks=1, seed=0)
        report = synthesize(str(MINILIB), store, settings, backend=docker_backend)
        assert report.valid == 1, (kind, report.rejections)
    return store


def task_of_kind_in(tasks, kind: str):
    """The task of `kind` among `tasks` (TaskStore.tasks values); a group is any task of several units."""
    for task in tasks:
        units = task.record.deleted
        if (kind == "group") == (len(units) > 1) and (kind == "group" or units[0].kind == kind):
            return task
    raise AssertionError(f"no {kind} task in the store")


def make_settings(store: Path, tmp_path: Path, **overrides):
    from env_server.settings import ServerSettings

    values = dict(
        tasks_dir=store,
        trace_db=tmp_path / "traces.sqlite",
        max_episodes=4,
        warm_pool_per_image=1,
        warm_pool_total=1,
        idle_timeout_s=300.0,
        reaper_interval_s=3600.0,
    )
    values.update(overrides)
    return ServerSettings(**values)


@contextlib.contextmanager
def live_runtime(backend, store: Path, tmp_path: Path, **overrides):
    """A started EpisodeRuntime over `store`, closed with its trace store on the way out."""
    live = make_runtime(backend, make_settings(store, tmp_path, **overrides))
    try:
        yield live
    finally:
        live.close()
        live.traces.close()


def make_runtime(docker_backend, settings):
    from env_server.lifecycle.runtime import EpisodeRuntime
    from env_server.task_store import TaskStore
    from env_server.traces.store import TraceStore

    return EpisodeRuntime(
        settings, TaskStore(settings.tasks_dir), docker_backend, TraceStore(settings.trace_path())
    ).start()


@pytest.fixture(scope="module")
def runtime(docker_backend, demo_task_store, tmp_path_factory):
    """A started EpisodeRuntime; every container it made is gone after the module."""
    live = make_runtime(docker_backend, make_settings(demo_task_store, tmp_path_factory.mktemp("rt")))
    yield live
    live.close()
    live.traces.close()


@pytest.fixture(scope="module")
def server(docker_backend, demo_task_store, tmp_path_factory):
    """The whole server (HTTP, WebSocket, gRPC) on free local ports, stopped after the module."""
    from env_server.server import start_in_background

    settings = make_settings(demo_task_store, tmp_path_factory.mktemp("srv"), host="127.0.0.1", port=0, grpc_port=0)
    with start_in_background(settings, docker_backend) as running:
        yield running


@pytest.fixture(scope="session")
def memory_task_store(tmp_path_factory) -> Path:
    """The demo task store for the in-memory backend (no image, no engine)."""
    from tests.task_fixture import build_memory_task_store

    return build_memory_task_store(tmp_path_factory.mktemp("memory-tasks"))


def memory_backend():
    """The in-memory backend with the demo task's image: the scripted shell, and grading run on this host."""
    from sandbox.lifecycle.memory_backend import MemoryBackend
    from tests.env_server.memory_commands import grading_commands
    from tests.task_fixture import MEMORY_IMAGE

    return MemoryBackend({MEMORY_IMAGE: {}}, commands=grading_commands)


@pytest.fixture(scope="module")
def memory_runtime(memory_task_store, tmp_path_factory):
    """An EpisodeRuntime on the in-memory backend: tools and stepping with no engine."""
    backend = memory_backend()
    live = make_runtime(backend, make_settings(memory_task_store, tmp_path_factory.mktemp("memrt")))
    yield live
    live.close()
    live.traces.close()


@pytest.fixture(scope="module")
def memory_server(memory_task_store, tmp_path_factory):
    """The whole server (HTTP, WebSocket, gRPC) on the in-memory backend: the wire with no engine."""
    from env_server.server import start_in_background

    backend = memory_backend()
    settings = make_settings(
        memory_task_store, tmp_path_factory.mktemp("memsrv"), host="127.0.0.1", port=0, grpc_port=0
    )
    with start_in_background(settings, backend) as running:
        yield running


@pytest.fixture(scope="module")
def two_task_memory_server(tmp_path_factory):
    """The whole server on the in-memory backend over a store of two tasks (the demo task and its twin)."""
    from env_server.server import start_in_background
    from tests.task_fixture import DEMO_TASK_ID, TWIN_TASK_ID, build_memory_task_store

    store = build_memory_task_store(tmp_path_factory.mktemp("two-tasks"), (DEMO_TASK_ID, TWIN_TASK_ID))
    settings = make_settings(store, tmp_path_factory.mktemp("twosrv"), host="127.0.0.1", port=0, grpc_port=0)
    with start_in_background(settings, memory_backend()) as running:
        yield running
