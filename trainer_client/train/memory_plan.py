"""`regrow train --plan`: the GPU memory a run needs, per GPU, from the model's shape and the run's settings.

An estimate in closed form, so that it needs neither the weights nor a GPU:
- weights, gradients and AdamW's two moments: 4 + 4 + 8 bytes a trained parameter (the loader keeps fp32 master
  weights; bf16 is autocast), half that with --weights-dtype bfloat16; a frozen parameter under LoRA keeps only its
  weight bytes;
- FSDP (full shard) and ZeRO-3 divide those by the number of GPUs; DDP keeps a whole copy on each;
- activations in bf16: about 2 x (8h + 4i) bytes a token a layer, 4 x in fp32 (a CPU, or --no-bf16) (attention
  through a memory-efficient kernel, so nothing quadratic in the length); with gradient checkpointing, 2h bytes
  (4h in fp32) a token a layer plus one layer's whole set;
- on a CPU, in fp32: 9h + 4i values a token a layer (what autograd saves, counted by a saved-tensors hook) plus 7 bytes
  a layer per square token of each padded row (the attention mask's); TRL's fused LM head in torch ops, whose backward
  runs first, with every activation held: 8 fp32 temporaries of a tile of min(positions, 4,096) x min(vocab, 32,768)
  and the head weight's fp32 gradient; a step of one forward frees its gradients at zero_grad and makes each as its
  layer's activations go, so they count only where AdamW's update (them and a copy) outgrows that backward;
  `regrow bench memory` holds this within 15% of the peaks of real steps;
- fp32 logits of one turn a row (TRL scores the rest in chunks); on a GPU, SDPO holds the student's and the teacher's
  fp32 logits of every distilled token of the rows at once, beside the step's activations, and its backward the
  student's gradient: 12 bytes a distilled token a vocabulary entry (an H200 measured 12.2: 49 GiB over RLVR alone
  for 28k tokens of Qwen2.5's 151,936). On a CPU SDPO added nothing measurable to a step's peak (4k distilled tokens:
  5.34 GiB against 5.30), which TRL's head tiles set, so a turn each is counted;
- on a GPU with fp32 weights under bf16 autocast, the bf16 copy of every weight autocast keeps through the forward;
- an SDPO teacher on `ema` or `initial` weights holds a second full fp32 copy, unless LoRA makes it the same weights;
- 10% of the rest for the allocator's slack (15% on a GPU: with 10%, an H200 measured up to 7% above the plan), plus
  1.5 GiB for what runs around the step: the CUDA context on a GPU, the interpreter and torch's libraries on a CPU
  (1.1 GiB resident there before the model loads).

On a CPU the same arithmetic in fp32 is held against the host's available memory: a run past it was killed by the
kernel mid-step with no word of why.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from trainer_client.train.placement import local_processes, process_rank

if TYPE_CHECKING:
    from trainer_client.train.settings import TrainSettings

logger = logging.getLogger(__name__)
GIB = 1024**3
# A CPU step's activations, as autograd's saved-tensors hook counts them (module docstring): fp32 values a token a
# layer, in h and i, and bytes a layer per square token of a padded row. The GPU's 8h + 4i is not measured.
CPU_HIDDEN_FACTOR, CPU_INTERMEDIATE_FACTOR, CPU_SQUARE_BYTES = 9, 4, 7
# TRL's fused LM head (trl.kernels.chunked_logprob) projects at most this many positions against this many vocabulary
# entries at once; on a CPU its backward holds about 8 fp32 temporaries of that tile (measured: 1.0 MiB a position).
FUSED_HEAD_TOKENS, FUSED_HEAD_VOCAB, CPU_TILE_COPIES = 4096, 32768, 8
# What a GPU step with SDPO holds beyond RLVR's, in bytes a distilled token a vocabulary entry (module docstring).
SDPO_GPU_BYTES = 12
SHAPES = Path(__file__).with_name("model_shapes")
# SmolLM2-135M-Instruct, the demo policy (its GGUF holds the weights, so its shape is written here).
DEMO_SHAPE = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
}
# A fixed allowance for what holds memory beside the run's own terms: the CUDA context on a GPU; on a CPU the
# interpreter and torch's libraries (1.1 GiB resident before the model loads, `regrow bench memory`).
PROCESS_BYTES = 1.5 * GIB
PROCESS_PART_GPU, PROCESS_PART_CPU = "CUDA context", "interpreter, libraries"
# A prompt (system message, tools and task) before the completion tokens, in tokens.
PROMPT_TOKENS = 1024
Sharding = Literal["none", "fsdp", "zero3"]


@dataclass(frozen=True)
class ModelShape:
    """What the arithmetic needs of a decoder-only transformer (Qwen2, Llama, SmolLM2)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @classmethod
    def from_config(cls, name: str, config: dict) -> ModelShape:
        return cls(
            name=name,
            hidden=config["hidden_size"],
            intermediate=config["intermediate_size"],
            layers=config["num_hidden_layers"],
            heads=config["num_attention_heads"],
            kv_heads=config.get("num_key_value_heads", config["num_attention_heads"]),
            vocab=config["vocab_size"],
            tied=config.get("tie_word_embeddings", False),
        )

    @property
    def kv_width(self) -> int:
        return self.hidden // self.heads * self.kv_heads

    @property
    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of each linear layer of one block: q, k, v, o, gate, up, down."""
        h, i, kv = self.hidden, self.intermediate, self.kv_width
        return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]

    @property
    def parameters(self) -> int:
        block = sum(a * b for a, b in self.linear_shapes) + 2 * self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * block + embeddings + self.hidden

    def lora_parameters(self, r: int) -> int:
        """An adapter of rank r on every linear layer of every block (peft's all-linear leaves the LM head out)."""
        return self.layers * sum(r * (a + b) for a, b in self.linear_shapes)


def shape_of(model: str) -> ModelShape:
    """The shape of `model`: a shipped shape's name (qwen2.5-7b), a save_pretrained folder, or the demo policy."""
    shipped = SHAPES / f"{model}.json"
    if shipped.is_file():
        return ModelShape.from_config(model, json.loads(shipped.read_text()))
    if model == "smollm2":
        return ModelShape.from_config(model, DEMO_SHAPE)
    config = Path(model) / "config.json"
    if config.is_file():
        return ModelShape.from_config(model, json.loads(config.read_text()))
    names = ", ".join(sorted(path.stem for path in SHAPES.glob("*.json")))
    raise FileNotFoundError(f"--model {model!r}: no config.json there; for a plan, name a folder or one of: {names}")


@dataclass(frozen=True)
class RunShape:
    """What a run puts on each GPU: its rows of tokens and how its weights are trained and held."""

    rows: int  # sequences in one optimizer step on this GPU
    tokens_per_row: int
    rows_at_once: int | None = None  # sequences in one forward and backward (--micro-batch-rows); None: all rows
    turn_tokens: int = 384  # the longest turn: the logits held at once
    distilled_tokens: int | None = None  # SDPO's distilled tokens a row at most; None: every completion token
    gpus: int = 1
    sharding: Sharding = "none"
    lora_r: int = 0
    gradient_checkpointing: bool = False
    sdpo_teacher: str | None = None  # live, ema or initial when SDPO is on
    weight_bytes: int = 4  # 2 with --weights-dtype bfloat16: its gradients and AdamW state too
    activation_bytes: int = 2  # 4 where the step runs in fp32: on a CPU, or a GPU with --no-bf16
    on_gpu: bool = True  # False: the plan is held against a CPU host's memory

    @property
    def forward_rows(self) -> int:
        """The rows whose activations and logits are held at once: a micro-batch's, or the whole step's."""
        return min(self.rows_at_once or self.rows, self.rows)

    @property
    def distilled_per_row(self) -> int:
        """The tokens of a row whose student and teacher distributions SDPO holds: the completion's, at most."""
        if self.distilled_tokens is not None:
            return self.distilled_tokens
        return max(self.tokens_per_row - PROMPT_TOKENS, self.turn_tokens)

    @property
    def teacher_copy(self) -> bool:
        """An SDPO teacher with weights of its own: ema or initial on a full model (LoRA switches its adapter)."""
        return self.sdpo_teacher in ("ema", "initial") and not self.lora_r


@dataclass
class MemoryPlan:
    """Bytes per GPU by what holds them, against the GPU's memory."""

    model: str
    run: RunShape
    capacity_bytes: int
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def total_bytes(self) -> float:
        return sum(self.parts.values())

    @property
    def modelled_bytes(self) -> float:
        """What the run's own terms hold, without the fixed allowance for the process around them."""
        return self.total_bytes - self.parts.get(PROCESS_PART_GPU, 0) - self.parts.get(PROCESS_PART_CPU, 0)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def remedy(self) -> str:
        """What would make a run that does not fit fit, the cheapest first."""
        steps = []
        if self.run.forward_rows > 1:
            steps.append("--micro-batch-rows 1")
        if not self.run.on_gpu:  # on a CPU the activations are nearly all of it
            steps.append("fewer tokens a step (--max-completion-tokens, --groups-per-step, --group-size)")
            return "; or ".join(steps)
        if not self.run.gradient_checkpointing:
            steps.append("--gradient-checkpointing")
        if not self.run.lora_r:
            steps.append("--lora-r 16")
        if self.run.sharding == "none" or self.run.gpus == 1:
            steps.append("sharding over more GPUs (FSDP or ZeRO-3 under accelerate launch)")
        steps.append("fewer tokens a step (--groups-per-step, --group-size, --max-completion-tokens)")
        return "; or ".join(steps)

    def lines(self) -> list[str]:
        verdict = "fits" if self.fits else f"does not fit: try {self.remedy()}"
        where = f"each of {self.run.gpus} GPU(s)" if self.run.on_gpu else "this CPU host"
        header = (
            f"{self.model}: {self.run.rows} rows ({self.run.forward_rows} at once) x {self.run.tokens_per_row} tokens "
            f"on {where}, "
            f"sharding {self.run.sharding}, "
            + (f"LoRA r={self.run.lora_r}" if self.run.lora_r else "full fine-tune")
            + (", gradient checkpointing" if self.run.gradient_checkpointing else "")
            + (", bf16 weights and optimizer state" if self.run.weight_bytes == 2 else "")
        )
        parts = [f"  {name:<22} {value / GIB:8.1f} GiB" for name, value in self.parts.items()]
        total = f"  {'total':<22} {self.total_bytes / GIB:8.1f} GiB of {self.capacity_bytes / GIB:.0f} GiB: {verdict}"
        return [header, *parts, total]


def plan_memory(shape: ModelShape, run: RunShape, capacity_gib: float) -> MemoryPlan:
    """The per-GPU memory of a run of `shape` shaped as `run`, against a GPU of `capacity_gib`."""
    params = shape.parameters
    trained = shape.lora_parameters(run.lora_r) if run.lora_r else params
    shard = run.gpus if run.sharding != "none" else 1
    plan = MemoryPlan(shape.name, run, int(capacity_gib * GIB))
    width = run.weight_bytes
    plan.parts["weights"] = width * (params + (trained if run.lora_r else 0)) / shard
    plan.parts["gradients"] = width * trained / shard
    plan.parts["optimizer (AdamW)"] = 2 * width * trained / shard
    if run.teacher_copy:
        plan.parts["SDPO teacher copy"] = width * params
    plan.parts["activations"] = activation_bytes(shape, run)
    plan.parts.update(head_parts(shape, run))
    if not run.on_gpu and run.forward_rows == run.rows:
        plan.parts["gradients"] = update_excess(plan.parts)
    if run.on_gpu and run.activation_bytes == 2 and width == 4 and run.sharding == "none":
        plan.parts["bf16 weight copies (autocast)"] = 2 * params
    plan.parts["allocator slack"] = (0.15 if run.on_gpu else 0.1) * plan.total_bytes
    plan.parts[PROCESS_PART_GPU if run.on_gpu else PROCESS_PART_CPU] = PROCESS_BYTES
    return plan


def activation_bytes(shape: ModelShape, run: RunShape) -> float:
    """What autograd keeps of one forward for its backward: the rows at once, every layer."""
    tokens = run.forward_rows * run.tokens_per_row
    per_layer_token = run.activation_bytes * (8 * shape.hidden + 4 * shape.intermediate)
    if run.gradient_checkpointing:
        return tokens * (shape.layers * run.activation_bytes * shape.hidden + per_layer_token)
    if run.on_gpu:
        return tokens * shape.layers * per_layer_token
    cpu_layer_token = run.activation_bytes * (
        CPU_HIDDEN_FACTOR * shape.hidden + CPU_INTERMEDIATE_FACTOR * shape.intermediate
    )
    square = run.forward_rows * run.tokens_per_row**2 * CPU_SQUARE_BYTES
    return shape.layers * (tokens * cpu_layer_token + square)


def update_excess(parts: dict[str, float]) -> float:
    """The gradients a CPU step of one forward adds to its peak: each is made as its layer's activations are freed
    and zero_grad frees them all, so only the optimizer update holds them all, with one copy of their size (AdamW's
    foreach square root), and it adds only what it holds beyond the backward's activations and head."""
    backward = parts["activations"] + sum(value for name, value in parts.items() if name.startswith("LM head"))
    return max(0.0, 2 * parts["gradients"] - backward)


def head_parts(shape: ModelShape, run: RunShape) -> dict[str, float]:
    """What the LM head holds at once: fp32 logits of one turn a row on a GPU (TRL's Triton head scores the rest in
    tiles); on a CPU, TRL's fused head in torch ops; SDPO's logits of every distilled token, or on a CPU of a turn."""
    turn_logits = run.forward_rows * run.turn_tokens * shape.vocab * 4
    if run.on_gpu:
        sdpo = SDPO_GPU_BYTES * run.forward_rows * run.distilled_per_row * shape.vocab
        return {"logits (fp32)": turn_logits, **({"SDPO logits": float(sdpo)} if run.sdpo_teacher else {})}
    # the head's backward runs first, with every activation still held: its tile of every position against a
    # vocabulary chunk, in CPU_TILE_COPIES fp32 temporaries, and the head weight's fp32 gradient accumulator
    positions = min(run.forward_rows * run.tokens_per_row, FUSED_HEAD_TOKENS)
    tiles = CPU_TILE_COPIES * positions * min(shape.vocab, FUSED_HEAD_VOCAB) * 4 + shape.vocab * shape.hidden * 4
    return {"LM head tiles (fp32)": float(tiles), **({"logits (fp32)": 2 * turn_logits} if run.sdpo_teacher else {})}


def run_shape(settings: TrainSettings, gpus: int, sharding: Sharding, device: str = "cuda") -> RunShape:
    """How `settings` spread over `gpus` (on a CPU `device`, over the processes): each rank trains its share of a
    step's groups."""
    rows = settings.group_size * settings.groups_per_step
    return RunShape(
        rows=-(-rows // gpus),
        rows_at_once=settings.micro_batch_rows,
        tokens_per_row=PROMPT_TOKENS + settings.max_completion_tokens,
        turn_tokens=settings.max_turn_tokens,
        gpus=gpus,
        sharding=sharding,
        lora_r=settings.lora_r,
        gradient_checkpointing=settings.gradient_checkpointing,
        sdpo_teacher=settings.sdpo_teacher if settings.alpha_sdpo else None,
        weight_bytes=2 if settings.weights_dtype_on(device, sharding=sharding) == "bfloat16" else 4,
        activation_bytes=2 if device == "cuda" and settings.bf16 else 4,
        on_gpu=device == "cuda",
    )


def fitted_plan(shape: ModelShape, run: RunShape, capacity_gib: float) -> MemoryPlan:
    """The plan of `run`, with the most rows at once (a divisor of its rows) that fits when it names none: the
    whole step where it fits, else micro-batches of fewer rows; at one row when none fits."""
    if run.rows_at_once is not None:
        return plan_memory(shape, run, capacity_gib)
    plan = None
    for rows in sorted((d for d in range(1, run.rows + 1) if run.rows % d == 0), reverse=True):
        plan = plan_memory(shape, replace(run, rows_at_once=rows), capacity_gib)
        if plan.fits:
            return plan
    assert plan is not None  # a run has at least one row
    return plan


def host_memory_gib() -> tuple[float, float]:
    """This host's memory in GiB: (all of it, what a new process can have now: MemAvailable)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return total, int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    return total, total


def launched_sharding() -> Sharding:
    """How `accelerate launch` spread the weights over the processes it started: none outside FSDP and ZeRO-3."""
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return "fsdp"
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return "zero3"
    return "none"


def check_memory(settings: TrainSettings, device: str, host_gib: tuple[float, float] | None = None) -> int | None:
    """Refuse, before the model loads, a run whose planned memory exceeds this GPU's, naming the remedy; else the
    rows a forward takes at once (--micro-batch-rows, or the most that fit when it is not given). On a CPU the plan
    (an upper bound: every row at --max-completion-tokens) is held against the host's RAM, shared by the processes
    launched on it: past all of it the run is refused, past what is free now it is warned of."""
    try:
        shape = shape_of(settings.model)
    except FileNotFoundError:
        return None  # a GGUF file: its shape is in the weights; the load itself will say what is wrong
    gpus, sharding = process_rank()[1], launched_sharding()
    if device == "cuda":
        capacity, available, held = _device_gib(), None, "each GPU"
    else:
        total, free = host_gib or host_memory_gib()
        capacity, available, held = total / local_processes(), free / local_processes(), "this host, per process"
    plan = fitted_plan(shape, run_shape(settings, gpus, sharding, device), capacity)
    logger.info("memory plan:\n%s", "\n".join(plan.lines()))
    needed = plan.total_bytes / GIB
    if not plan.fits:
        raise RuntimeError(
            f"this run needs up to {needed:.0f} GiB on {held} and there are {capacity:.0f} GiB: try {plan.remedy()} "
            "(`regrow train --plan` shows the parts; --no-memory-check runs it anyway)"
        )
    if available is not None and needed > available:
        logger.warning(
            "this run may need up to %.0f GiB on %s and %.0f GiB are free now: the kernel may kill it mid-step; "
            "if it does, try %s",
            needed,
            held,
            available,
            plan.remedy(),
        )
    return plan.run.forward_rows


def _device_gib() -> float:
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / GIB
