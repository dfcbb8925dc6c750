"""A real OpenAI-compatible server for tests: `transformers serve` on a local model folder, on loopback."""

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.live_process import free_port, stop, wait_healthy


@contextlib.contextmanager
def transformers_serve(model_dir: Path, log_path: Path) -> Iterator[str]:
    """Serve `model_dir` offline; yields the base URL (`http://127.0.0.1:PORT`) once /health answers."""
    port = free_port()
    serve = Path(sys.executable).parent / "transformers"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = log_path.open("wb")
    process = subprocess.Popen(
        [str(serve), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(base, process, timeout_s=180)
        except RuntimeError as error:
            raise RuntimeError(f"{error}: {log_path.read_text()[-2000:]}") from None
        yield base
    finally:
        stop(process, grace_s=20)
        log.close()
