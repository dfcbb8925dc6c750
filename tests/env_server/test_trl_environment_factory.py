"""A TRL `environment_factory` class over the unmodified OpenEnv client: TRL's tool extraction accepts it."""

import inspect

import pytest

from proto.actions import TOOL_ARGS
from tests.task_fixture import DEMO_TASK_ID, ORIGINAL_OPS

transformers_utils = pytest.importorskip("transformers.utils", reason="the train extra is not installed")
pytest.importorskip("trl", reason="the train extra is not installed")
pytestmark = [pytest.mark.docker, pytest.mark.train]


class RegrowCodingEnv:
    """One rollout's episode on a regrow env server, its tools as methods (the shape TRL's GRPOTrainer expects)."""

    base_url = "http://127.0.0.1:8000"

    def __init__(self):
        from openenv.core.generic_client import GenericEnvClient

        self._client = GenericEnvClient(base_url=self.base_url).sync()
        self._reward = 0.0

    def reset(self, task_id: str | None = None, **kwargs) -> str:
        result = self._client.reset(task_id=task_id) if task_id else self._client.reset()
        self._reward = 0.0
        return result.observation["problem_statement"]

    def _call(self, tool: str, **args) -> str:
        result = self._client.step({"tool": tool, "args": {k: v for k, v in args.items() if v is not None}})
        if result.done:
            self._reward = float(result.reward or 0.0)
        observation = result.observation
        return "\n".join(filter(None, [observation["output"], observation.get("feedback")]))

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Read a text file, optionally a range of lines.

        Args:
            path: File path; relative paths are under /workspace.
            start_line: First line to show (1-based).
            end_line: Last line to show (inclusive).
        """
        return self._call("read_file", path=path, start_line=start_line, end_line=end_line)

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file with the given content.

        Args:
            path: File path; relative paths are under /workspace.
            content: The whole new content of the file.
        """
        return self._call("write_file", path=path, content=content)

    def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace one exact occurrence of `old` with `new` in a file.

        Args:
            path: File path; relative paths are under /workspace.
            old: Exact text to replace; it must occur exactly once.
            new: Replacement text.
        """
        return self._call("edit_file", path=path, old=old, new=new)

    def run(self, command: str, timeout: float | None = None) -> str:
        """Run a shell command in /workspace and return its output and exit code.

        Args:
            command: Shell command, run in /workspace.
            timeout: Seconds; capped by the server.
        """
        return self._call("run", command=command, timeout=timeout)

    def search(self, pattern: str, path: str | None = None) -> str:
        """Search files for a regular expression; returns matching lines with line numbers.

        Args:
            pattern: Regular expression (grep -E).
            path: File or directory to search; default /workspace.
        """
        return self._call("search", pattern=pattern, path=path)

    def list_dir(self, path: str | None = None) -> str:
        """List a directory.

        Args:
            path: Directory; default /workspace.
        """
        return self._call("list_dir", path=path)

    def submit(self) -> str:
        """Finish the episode; your changes are graded by the task's tests."""
        return self._call("submit")

    def get_reward(self) -> float:
        return self._reward


def trl_tool_methods(instance) -> list:
    """The methods GRPOTrainer exposes as tools (trl 1.16.0, grpo_trainer.py: public functions but reset/get_reward)."""
    members = inspect.getmembers(type(instance), predicate=inspect.isfunction)
    return [getattr(instance, name) for name, _ in members if name not in ("reset", "get_reward") and not name.startswith("_")]


def test_trl_extracts_a_json_schema_per_tool_matching_the_server(server, monkeypatch):
    monkeypatch.setattr(RegrowCodingEnv, "base_url", server.http_url)
    env = RegrowCodingEnv()
    schemas = {s["function"]["name"]: s["function"] for s in map(transformers_utils.get_json_schema, trl_tool_methods(env))}
    assert set(schemas) == set(TOOL_ARGS)
    for name, args_model in TOOL_ARGS.items():
        server_schema = args_model.model_json_schema()
        assert set(schemas[name]["parameters"].get("properties", {})) == set(server_schema.get("properties", {})), name
        assert set(schemas[name]["parameters"].get("required", [])) == set(server_schema.get("required", [])), name


def test_environment_factory_class_plays_an_episode_and_owns_the_reward(server, monkeypatch):
    monkeypatch.setattr(RegrowCodingEnv, "base_url", server.http_url)
    env = RegrowCodingEnv()
    assert "clamp" in env.reset(task_id=DEMO_TASK_ID)
    assert "def clamp" in env.read_file("calc/ops.py")
    assert env.write_file("calc/ops.py", ORIGINAL_OPS).startswith("wrote")
    assert "graded: reward 1" in env.submit()
    assert env.get_reward() == 1.0
    env._client.close()
