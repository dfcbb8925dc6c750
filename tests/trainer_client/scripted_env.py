"""A small scripted coding environment served by OpenEnv's real `create_app` on 127.0.0.1.

It answers like the coding env (CodingObservation, feedback on unknown tools, bad arguments and
unparseable calls) without Docker: `write_file` remembers files, `run` echoes, `submit` grades
1.0 when calc/ops.py was written, else 0.0. A `run` of `sleep N` sleeps, to provoke client timeouts;
a `run` of `lose-sandbox` answers as the real env does when the sandbox died (tool_error SANDBOX_GONE);
a reset of task `no-such-task` fails, as a request the env cannot serve; a reset that names a sampler draws a new
task every time; a prefix reset answers with a one-step prefix, or is refused for `prefix_of="refused"`; while
`busy_resets` counts down, a reset is refused as the real env refuses it when every episode slot is taken.

`python -m tests.trainer_client.scripted_env --port N` serves it as a process, for tests that kill a server.
"""

import argparse
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ClassVar

from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from pydantic import ValidationError

from proto import TOOL_ARGS, CodingObservation, EpisodeState, ServerHealth, ToolCall, tool_specs
from tests.live_process import served_in_thread


class ScriptedCodingEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    finished_commands: ClassVar[list[str]] = []  # every `run` answered here: a test can wait for a late reply
    draws: ClassVar[Iterator[int]] = itertools.count()
    busy_resets: ClassVar[int] = 0
    # (task_id, origin, run_id) of every reset: what a client said of its episodes
    reset_tags: ClassVar[list[tuple]] = []

    def __init__(self):
        super().__init__()
        self._state = EpisodeState()
        self.files: dict[str, str] = {}

    def reset(self, seed=None, episode_id=None, task_id=None, **kwargs) -> CodingObservation:
        ScriptedCodingEnv.reset_tags.append((task_id, kwargs.get("origin"), kwargs.get("run_id")))
        if ScriptedCodingEnv.busy_resets > 0:  # an episode outlives its socket while its sandbox closes
            ScriptedCodingEnv.busy_resets -= 1
            raise ValueError("CAPACITY_REACHED: all 1 episode slots are busy; retry later")
        if task_id == "no-such-task":
            raise ValueError("unknown task 'no-such-task'")
        if task_id is None and kwargs.get("sampler"):  # a draw that changes at every reset, as pass rates may
            task_id = f"drawn-{next(ScriptedCodingEnv.draws)}"
        prefix = None
        if kwargs.get("prefix_of") == "refused":
            raise ValueError("PREFIX_REFUSED: step 2 ran a command that changed files")
        if kwargs.get("prefix_of"):
            task_id = "prefixed"
            write = {"path": "calc/ops.py", "content": "def clamp(v, lo, hi):\n    return v\n"}
            history = [{"tool": "write_file", "args": write, "output": "wrote 37 bytes to calc/ops.py"}]
            prefix = {"of": kwargs["prefix_of"], "steps": kwargs.get("prefix_steps"), "history": history}
        self._state = EpisodeState(episode_id=episode_id or f"ep-{time.monotonic_ns()}", task_id=task_id or "calc")
        self.files = {}
        return CodingObservation(
            problem_statement="Implement clamp in calc/ops.py.",
            tools=tool_specs(),
            metadata={"task_id": self._state.task_id} | ({"prefix": prefix} if prefix else {}),
        )

    def step(self, action: ToolCall, timeout_s=None, **kwargs) -> CodingObservation:
        self._state.step_count += 1
        if action.metadata.get("parse_error"):
            return CodingObservation(
                output="", feedback=f"your tool call could not be read: {action.metadata['parse_error']}"
            )
        if action.tool not in TOOL_ARGS:
            return CodingObservation(feedback=f"unknown tool {action.tool!r}; the tools are {', '.join(TOOL_ARGS)}")
        try:
            args = TOOL_ARGS[action.tool].model_validate(action.args)
        except ValidationError as error:
            return CodingObservation(feedback=f"arguments do not fit {action.tool}: {error.errors()[0]['msg']}")
        if action.tool == "write_file":
            self.files[args.path] = args.content
            return CodingObservation(output=f"wrote {args.path}", exit_code=0)
        if action.tool == "run":
            if args.command == "lose-sandbox":
                self._state.done = True
                return CodingObservation(
                    feedback="the sandbox died; this episode is over",
                    done=True,
                    metadata={"tool_error": "SANDBOX_GONE"},
                )
            if args.command.startswith("sleep "):
                time.sleep(float(args.command.split()[1]))
            ScriptedCodingEnv.finished_commands.append(args.command)
            return CodingObservation(output=f"ran {args.command}", exit_code=0)
        if action.tool == "submit":
            self._state.done = True
            reward = 1.0 if "calc/ops.py" in self.files else 0.0
            return CodingObservation(
                output="graded", done=True, reward=reward, feedback=None if reward else "2 tests fail"
            )
        return CodingObservation(output=f"{action.tool} ok", exit_code=0)

    @property
    def state(self) -> EpisodeState:
        return self._state


def scripted_app(max_sessions: int = 8, free_slots: int | Callable[[], int] | None = None):
    """The scripted env's OpenEnv app; with `free_slots` (a number, or a function read at each request), its
    /health answers a regrow ServerHealth."""
    app = create_app(ScriptedCodingEnv, ToolCall, CodingObservation, max_concurrent_envs=max_sessions)
    if free_slots is not None:
        app.router.routes = [route for route in app.router.routes if getattr(route, "path", None) != "/health"]

        @app.get("/health")
        def health() -> ServerHealth:
            slots = free_slots() if callable(free_slots) else free_slots
            return ServerHealth(status="healthy", free_slots=slots, max_episodes=max_sessions)

    return app


@contextmanager
def serve_scripted_env(max_sessions: int = 8, free_slots: int | Callable[[], int] | None = None):
    """Run the scripted env's OpenEnv app on a free loopback port; yield its http:// URL."""
    with served_in_thread(
        scripted_app(max_sessions, free_slots), "the scripted env server", ws="websockets-sansio"
    ) as url:
        yield url


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-sessions", type=int, default=8)
    parsed = parser.parse_args()
    uvicorn.run(
        scripted_app(parsed.max_sessions),
        host="127.0.0.1",
        port=parsed.port,
        log_level="warning",
        ws="websockets-sansio",
    )
