"""Running the recorder plugin here, without Docker: a repository's tests under pytest with the recorder loaded, and a
stand-in sandbox whose `python` commands run in this interpreter."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from sandbox.limits import Limits
from task_synth.repository.editable_install import SCRATCH
from task_synth.validation.call_runs import RECORDER, RECORDER_FILES

# A task's image holds pytest and the project's own plugins, not this checkout's test tools (asyncio, anyio, trio,
# xdist, randomly, timeout): a child pytest loads only the plugins named with -p, and starts in 0.3 s instead of 0.6.
ONLY_NAMED_PLUGINS = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def recorded_raw_calls(
    tmp_path: Path, files: dict[str, str], functions: dict[str, list[str]], reads: list[str] = ()
) -> list:
    """Write `files` under `tmp_path`, run their tests with the recorder on `functions`, and return what it wrote;
    the library is every file outside tests/."""
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "plugins").mkdir()
    for name, source in RECORDER_FILES.items():
        (tmp_path / "plugins" / name).write_text(source.read_text())
    library = [str(tmp_path / path) for path in files if not path.startswith("tests/")]
    config = {"functions": functions, "library_files": library, "reads": list(reads)}
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path / 'plugins'}{os.pathsep}{tmp_path}",
        "REGROW_IO_CONFIG": str(tmp_path / "config.json"),
        "REGROW_IO_OUT": str(tmp_path / "calls.json"),
        "PYTEST_ADDOPTS": "",
        **ONLY_NAMED_PLUGINS,
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", RECORDER, "tests"]
    run = subprocess.run(
        [*command, "--rootdir", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads((tmp_path / "calls.json").read_text())


class LocalSandbox:
    """Runs a sandbox's `python` commands here: `root` stands for /workspace and holds the files written to the
    sandbox."""

    def __init__(self, root: Path):
        self.root = root
        for name, source in RECORDER_FILES.items():
            self.write_file(f"/plugins/{name}", source.read_text())

    def _here(self, path: str) -> str:
        return str(self.root / "sandbox" / path.lstrip("/")) if path.startswith("/") else path

    def write_file(self, path, data):
        Path(self._here(path)).parent.mkdir(parents=True, exist_ok=True)
        Path(self._here(path)).write_text(data)

    def read_file(self, path):
        from sandbox import SandboxFileNotFound

        if not Path(self._here(path)).is_file():
            raise SandboxFileNotFound(path)
        return Path(self._here(path)).read_bytes()

    def exec(self, command, timeout, cwd, env=None):
        env = {key: self._here(value) if value.startswith(SCRATCH) else value for key, value in (env or {}).items()}
        env = {**os.environ, **env, **ONLY_NAMED_PLUGINS}
        env["PYTHONPATH"] = f"{self._here('/plugins')}{os.pathsep}{self.root}"
        if command[0] == "sh":  # `sh -c SCRIPT sh ARGS`: `python` is this interpreter, sandbox paths are under root
            script = re.sub(r"(?<![\w.])/[\w./-]+", lambda found: self._here(found.group(0)), command[2])
            argv = ["sh", "-c", script.replace("python ", f"{sys.executable} ", 1), "sh", *map(self._here, command[4:])]
        else:
            argv = [sys.executable, *map(self._here, command[1:])]
        run = subprocess.run(argv, cwd=self.root, env=env, capture_output=True, text=True, timeout=timeout)
        # What a Docker sandbox keeps of a command's output (sandbox/limits.py), so that a lost tail shows here too.
        kept = Limits().output_cap_bytes
        return SimpleNamespace(
            stdout=run.stdout[:kept], stderr=run.stderr[:kept], exit_code=run.returncode, timed_out=False
        )


def importable_module(root: Path, monkeypatch, dotted: str, source: str) -> None:
    """`dotted` (`package.module`) holding `source` under `root`, importable in this process for as long as the test
    runs, whatever an earlier test imported under that name."""
    package, _, module = dotted.partition(".")
    (root / package).mkdir(parents=True, exist_ok=True)
    (root / package / "__init__.py").write_text("")
    (root / package / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(root))
    for name in (package, dotted):
        monkeypatch.delitem(sys.modules, name, raising=False)
