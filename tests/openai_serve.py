"""A real OpenAI-compatible server for tests: `transformers serve` on a local model folder, on loopback."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def transformers_serve(model_dir: Path, log_path: Path) -> Iterator[str]:
    """Serve `model_dir` offline; yields the base URL (`http://127.0.0.1:PORT`) once /health answers."""
    port = _free_port()
    serve = Path(sys.executable).parent / "transformers"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = log_path.open("wb")
    process = subprocess.Popen(
        [str(serve), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("transformers serve did not become healthy within 180s")
            time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
