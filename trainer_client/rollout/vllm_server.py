"""What regrow asks of a vLLM server before it samples from it: that it answers and is ready (asked before torch loads,
so that a missing server is said in a second), and the GRPOConfig fields of TRL's server mode."""

import importlib.util
from typing import Any

import httpx

START_SERVER = (
    "start one on the GPU machine with `trl vllm-serve --model <the --model folder> --port 8100` and wait for "
    "'Application startup complete', or drop --vllm-server to generate with the HF model"
)


class VLLMServerError(RuntimeError):
    """The vLLM server is missing or unusable, or it refused a turn; the message says what to do."""


def check_vllm_ready(url: str, device: str, timeout_s: float) -> None:
    """Fail fast, with the remedy, unless a vLLM server answers at `url` and this process can push weights to it."""
    check_vllm_answers(url, timeout_s)
    if device != "cuda":
        raise VLLMServerError(
            f"--vllm-server needs a CUDA device in the trainer, which pushes its weights to the server over NCCL; "
            f"the device here is {device!r}. Train on a GPU machine, or drop --vllm-server to generate with the HF "
            "model"
        )
    if importlib.util.find_spec("vllm") is None:
        raise VLLMServerError(
            "--vllm-server needs vllm installed next to the trainer too (TRL pushes the weights through vLLM's NCCL "
            "weight transfer): pip install vllm"
        )


def check_vllm_answers(url: str, timeout_s: float) -> None:
    """Fail unless a ready vLLM server answers at `url`; needs no torch, so `regrow train` asks it first."""
    try:
        health = httpx.get(f"{url}/health", timeout=timeout_s)
        models = httpx.get(f"{url}/v1/models", timeout=timeout_s) if health.status_code == 200 else None
    except httpx.HTTPError as error:
        raise VLLMServerError(
            f"no vLLM server answers at {url} ({type(error).__name__} on GET /health within {timeout_s:g} s): "
            f"{START_SERVER}"
        ) from error
    if models is None or models.status_code != 200:
        answer = (
            f"GET /health answered {health.status_code}"
            if models is None
            else f"GET /v1/models answered {models.status_code}"
        )
        raise VLLMServerError(f"{url} is not a ready vLLM server ({answer}): {START_SERVER}")


def server_mode_config(url: str, timeout_s: float) -> dict[str, Any]:
    """GRPOConfig fields that make GRPOTrainer sync its weights to the server before every rollout batch."""
    return {
        "use_vllm": True,
        "vllm_mode": "server",
        "vllm_server_base_url": url,
        "vllm_server_timeout": timeout_s,
        # one ratio over a whole multi-turn episode leaves the mask band on small per-token drifts; clip per token
        "vllm_importance_sampling_mode": "token_truncate",
    }
