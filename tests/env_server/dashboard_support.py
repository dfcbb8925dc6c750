"""What the dashboard tests share: a server with a token, and episodes of the demo task played over HTTP."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from openenv.core.generic_client import GenericEnvClient

from tests.env_server.conftest import make_settings
from tests.task_fixture import DEMO_TASK_ID

# Package code that makes every test pass without running it: a forgery the grader must flag.
# A forgery on both channels: pytest's reports say "passed", and, imported by the check child, the package writes a
# frame with the visible answer for every replayed call before the replays run.
FORGED_INIT = """import json, os, sys

import _pytest.python

_pytest.python.Function.runtest = lambda self: None
if sys.argv[0].endswith("check_child.py"):
    for i in range(len(json.load(open(sys.argv[1]))["calls"])):
        record = json.dumps({"i": i, "returned": "0"})
        os.write(int(sys.argv[2]), (json.dumps({"i": i, "channel": [record]}) + "\\n").encode())
"""


@contextmanager
def served_with_token(backend, store: Path, folder: Path, token: str, refresh_s: float) -> Iterator:
    """A whole server on free local ports whose pages need `token`, its dashboard refreshed every `refresh_s`."""
    from env_server.server import start_in_background

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
