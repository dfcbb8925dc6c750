"""A real OpenAI-compatible server for tests: `transformers serve` on a local model folder, on loopback."""

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.live_process import served_subprocess


@contextlib.contextmanager
def transformers_serve(model_dir: Path, log_path: Path) -> Iterator[str]:
    """Serve `model_dir` offline; yields the base URL (`http://127.0.0.1:PORT`) once /health answers."""
    serve = Path(sys.executable).parent / "transformers"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [str(serve), "serve", str(model_dir), "--host", "127.0.0.1", "--device", "cpu"]
    with served_subprocess(command, log_path, env, timeout_s=180, grace_s=20) as url:
        yield url
