"""What a task's /workspace holds before anyone touches it, and how its tests are configured: read once per task."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from pathlib import Path

from env_server.grading.change_set import Tree, read_tree
from env_server.grading.pytest_command import PYTEST_CONFIGS, pytest_config
from env_server.settings import GradeLimits
from env_server.task_store import Task
from sandbox import Sandbox
from sandbox.layout import WORKSPACE

CONFIG_NAMES = frozenset(name for name, _ in PYTEST_CONFIGS)
# Lists the modules of the pytest plugins the image installs, so that they can be named with -p (autoload is off).
_PLUGIN_PROBE_SOURCE = Path(__file__).with_name("inside") / "pytest_plugin_modules.py"


@dataclass(frozen=True)
class Pristine:
    """A task's untouched tree (Python sources and pytest configs kept), its pytest config and the image's plugins."""

    tree: Tree
    config: str | None
    plugins: tuple[str, ...]

    def config_file(self) -> dict[str, bytes]:
        """The pytest config file by its path, to be written back as the task had it; empty without one."""
        return {self.config: self.tree.data[self.config]} if self.config and self.config in self.tree.data else {}


@dataclass
class PristineCache:
    """Pristine trees by task (stored as files) or image, each read once: from the task's workspace archive, else from
    a fresh container before any submission is written to it."""

    trees: dict[str, Pristine] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, task: Task, sb: Sandbox, limits: GradeLimits) -> Pristine:
        key = task.id if task.as_files else task.record.image
        with self.lock:
            known = self.trees.get(key)
        if known is not None:
            return known
        # The Python sources are kept: the static scan compares each changed module with its pristine self.
        keep_sources = lambda path, _: path.endswith(".py") or path in CONFIG_NAMES  # noqa: E731
        if task.as_files:
            tree = read_tree([gzip.decompress(task.workspace_archive())], keep_sources)
        else:
            tree = read_tree(sb.export_tree(WORKSPACE, limits.tree_cap_bytes), keep_sources)
        for name in CONFIG_NAMES & tree.entries.keys():
            if name not in tree.data:
                tree.data[name] = sb.read_file(f"{WORKSPACE}/{name}")
        plugins = task.record.pytest_plugins
        if plugins is None:
            probe = sb.exec(["python", "-I", "-c", _PLUGIN_PROBE_SOURCE.read_text()], timeout=60, cwd="/")
            plugins = probe.stdout.split() if probe.exit_code == 0 else []
        configs = {name: tree.data[name] for name in CONFIG_NAMES if name in tree.data}
        pristine = Pristine(tree, pytest_config(configs), tuple(plugins))
        with self.lock:
            self.trees[key] = pristine
        return pristine
