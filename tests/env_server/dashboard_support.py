"""What the dashboard tests share: a server with a token, and episodes of the demo task played over HTTP."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from openenv.core.generic_client import GenericEnvClient

from tests.env_server.conftest import make_settings
from tests.task_fixture import DEMO_TASK_ID

# Package code that makes every test pass without running it: a forgery the grader must flag.
FORGED_INIT = "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"


@contextmanager
def served_with_token(backend, store: Path, folder: Path, token: str, refresh_s: float) -> Iterator:
    """A whole server on free local ports whose pages need `token`, its dashboard refreshed every `refresh_s`."""
    from env_server.lifecycle.server import start_in_background

    settings = make_settings(
        store, folder, host="127.0.0.1", port=0, grpc_port=0, api_token=token, dashboard_refresh_s=refresh_s
    )
    with start_in_background(settings, backend) as running:
        yield running


def write(path: str, content: str) -> dict:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


def play(url: str, steps: list[dict]) -> str:
    """One episode of the demo task: the steps, then submit. Returns its episode id."""
    with GenericEnvClient(base_url=url).sync() as env:
        episode_id = env.reset(task_id=DEMO_TASK_ID).observation["metadata"]["episode_id"]
        for step in steps:
            env.step(step)
        env.step({"tool": "submit", "args": {}})
    return episode_id
