"""A TRL `environment_factory` class over the unmodified OpenEnv client, for training with TRL's own GRPOTrainer."""

from __future__ import annotations


class RegrowCodingEnv:
    """One rollout's episode on a regrow env server, its tools as methods: pass the class as TRL's
    `environment_factory`.

    Set `base_url` (a subclass, or `RegrowCodingEnv.base_url = ...`) to your server. TRL calls `reset`, exposes
    every other public method as a tool from its signature and docstring, and reads `get_reward` at the end.
    """

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
