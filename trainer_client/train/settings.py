"""Settings of a training run; each can come from the CLI or from a `REGROW_TRAIN_...` variable."""

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from trainer_client.env.server_pool import env_urls
from trainer_client.rollout.stream_settings import EnvRetries

FULL_LEARNING_RATE = 1e-6
# A low-rank adapter moves a few weights from zero: it wants about ten times the full fine-tune's rate.
LORA_LEARNING_RATE = 1e-5


class TrainSettings(BaseSettings):
    """What `regrow train` runs: where the env is, which policy, how episodes are played and scored."""

    # cli_shortcuts: the short names these options have always had, beside the field's own (kebab-case) name.
    model_config = SettingsConfigDict(
        env_prefix="REGROW_TRAIN_",
        cli_shortcuts={"task-ids": "task-id", "learning-rate": "lr", "vllm-timeout-s": "vllm-timeout"},
    )
    _lora_rate_by_default: bool = PrivateAttr(default=False)

    env: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Env server URL: http://host:port (WebSocket /ws) or grpc://host:port. Repeat the flag (or give "
        "a comma-separated or JSON list) for several servers; a hostname with several addresses is one server each.",
    )
    model: str = Field(default="smollm2", description="Policy: a save_pretrained folder, a .gguf file, or 'smollm2'.")
    output_dir: Path = Field(default=Path("runs/regrow"), description="Checkpoints and TensorBoard logs.")
    task_ids: list[str] = Field(
        default_factory=list,
        description="Tasks to train on, cycled (repeat the flag); empty samples by seed.",
    )
    split: str = Field(default="train", description="Task split to sample from when no task ids are given.")
    sampler: Literal["uniform", "frontier"] = Field(
        default="uniform",
        description="How the env draws each group's task from the split: uniformly, or frontier (the tasks whose "
        "recorded pass rate is nearest one half, so fewer groups pass or fail whole and carry no gradient: TRL logs "
        "their share as frac_reward_zero_std). Over HTTP/WebSocket servers.",
    )
    prefix_sampling: bool = Field(
        default=False,
        description="Prefix sampling: after a group of a task passes or fails whole, the task's next group starts from "
        "a prefix of one of its episodes with the other outcome (env prefix resets; the prefix is prompt, untrained).",
    )
    prefix_fraction: float = Field(
        default=0.5, gt=0, lt=1, description="Share of the source episode's steps a prefix group starts after."
    )
    steps: int = Field(default=100, ge=1, description="Optimizer steps.")
    group_size: int = Field(default=4, ge=2, description="Episodes per task in a GRPO group.")
    groups_per_step: int = Field(default=2, ge=1, description="Groups in one optimizer step.")
    micro_batch_rows: int | None = Field(
        default=None,
        ge=1,
        description="Rows (episodes) of a rank's share of a step in one forward and backward; the rest accumulate "
        "(TRL's per-device batch and gradient accumulation): less memory, the same step. Default: the most rows, a "
        "divisor of the share, whose memory plan fits the device (the whole share where it fits).",
    )
    workers: int = Field(default=4, ge=1, description="Concurrent rollout workers (env sessions).")
    max_staleness: int = Field(default=1, ge=0, description="Drop groups started more than this many updates ago.")
    uniform_groups: Literal["auto", "drop", "keep"] = Field(
        default="auto",
        description="A group whose rewards are all equal has no RLVR gradient. drop: play another in its place (as "
        "DAPO's dynamic sampling does); keep: train on it; auto: drop when RLVR is the only channel (--alpha-sdpo 0), "
        "keep when SDPO may still learn from its feedback turns.",
    )
    uniform_patience: int = Field(
        default=4,
        ge=0,
        description="Uniform groups dropped in a row before one is kept, so that a policy that fails every task still "
        "takes steps, at most this many times more episodes.",
    )
    max_turns: int = Field(default=12, ge=1, description="Policy turns per episode.")
    max_turn_tokens: int = Field(default=384, ge=8, description="Tokens the policy may generate in one turn.")
    max_completion_tokens: int = Field(default=3072, ge=64, description="Token budget of all turns and env replies.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature of the rollouts.")
    learning_rate: float = Field(
        default=FULL_LEARNING_RATE,
        gt=0,
        description=f"Optimizer learning rate; default {FULL_LEARNING_RATE:g}, {LORA_LEARNING_RATE:g} with --lora-r.",
    )
    lr_schedule: Literal["linear", "constant", "cosine"] = Field(
        default="linear",
        description="How the learning rate moves over the steps (transformers' scheduler): linear decays it to 0 "
        "by the last step; constant keeps it, as a run of a few steps wants.",
    )
    loss_type: str = Field(default="dr_grpo", description="TRL loss: dr_grpo, grpo, dapo, bnpo, cispo, sapo, ...")
    importance_correction: bool = Field(
        default=True,
        description="Without vLLM, the sampler's own logprobs are PPO's old logprobs: the ratio and its clipping see "
        "how far the policy moved since a turn was sampled. False: TRL's on-policy default (ratio 1).",
    )
    alpha_sdpo: float = Field(
        default=0.0, ge=0, description="Weight of the SDPO channel (with --channel-weights auto: its gradient's share)."
    )
    channel_weights: Literal["fixed", "auto"] = Field(
        default="fixed",
        description="fixed: --alpha-sdpo and --beta-dpo multiply their losses. auto: they are the wanted ratio of each "
        "channel's gradient norm to RLVR's, and each step's measured norms set the multiplier (logged as "
        "sdpo/weight, dpo/weight).",
    )
    sdpo_teacher: Literal["live", "ema", "initial"] = Field(default="live", description="SDPO teacher weights.")
    sdpo_jsd_alpha: float = Field(default=0.5, ge=0, le=1, description="0 forward KL, 1 reverse KL, between: JSD.")
    sdpo_top_k: int | None = Field(
        default=None, ge=1, description="Distil only the student's top-k tokens plus a tail bucket."
    )
    sdpo_importance_clip: float = Field(default=2.0, gt=0, description="Upper clip of pi_theta/pi_rollout per token.")
    pairs: Path | None = Field(default=None, description="Replay pairs JSONL for the DPO channel.")
    beta_dpo: float = Field(
        default=0.0, ge=0, description="Weight of the DPO channel (with --channel-weights auto: its gradient's share)."
    )
    dpo_beta: float = Field(default=0.1, gt=0, description="The DPO loss's own beta.")
    dpo_pairs_per_step: int = Field(default=4, ge=1, description="Replay pairs in each optimizer step.")
    dpo_context_grad: bool = Field(
        default=True,
        description="Backpropagate DPO through the pairs' contexts (exact); False: only through the action tokens, "
        "cheaper.",
    )
    lora_r: int = Field(
        default=0,
        ge=0,
        description="Rank of a LoRA adapter (peft) to train over frozen weights; 0 trains every weight. The SDPO "
        "teacher's initial weights are then the adapter switched off, with no second copy of the model.",
    )
    lora_alpha: int | None = Field(default=None, gt=0, description="LoRA's alpha; default 2 x --lora-r.")
    lora_dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the LoRA adapter's input.")
    lora_target_modules: str = Field(
        default="all-linear",
        description="Layers that get an adapter: 'all-linear' or comma-separated names (q_proj,v_proj).",
    )
    weights_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="bfloat16 keeps the weights, their gradients and AdamW's state in bf16: half the memory, but "
        "updates smaller than bf16's resolution of a weight are lost. auto: bfloat16 on a GPU and float32 on a CPU; "
        "with --beta-dpo, the dtype the pairs' reference was scored in (`regrow replay` loads float32).",
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in the backward pass: less memory, about a third slower."
    )
    plan: bool = Field(
        default=False,
        description="Print the memory each GPU needs for --model (a folder, or qwen2.5-0.5b, qwen2.5-1.5b, "
        "qwen2.5-7b) and these settings, say whether it fits, and exit (1 when it does not); needs no --env.",
    )
    plan_gpus: int = Field(default=1, ge=1, description="For --plan: the GPUs the run spreads over.")
    plan_sharding: Literal["none", "fsdp", "zero3"] = Field(
        default="none", description="For --plan: how the weights are spread (none is DDP: a whole copy per GPU)."
    )
    plan_gpu_gib: float = Field(default=80.0, gt=0, description="For --plan: each GPU's memory in GiB.")
    memory_check: bool = Field(
        default=True,
        description="Refuse to start a run whose planned memory exceeds the GPU's (on a CPU, the host's available "
        "memory), naming the remedy.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="Where the policy trains.")
    bf16: bool = Field(default=True, description="bf16 autocast on a GPU (ignored on CPU).")
    progress_interval_s: float = Field(
        default=10.0, gt=0, description="Where stderr is no terminal (a log): seconds between progress lines."
    )
    logger: Literal["tensorboard", "none"] = Field(default="tensorboard", description="Where metrics go.")
    save_steps: int = Field(default=50, ge=1, description="Checkpoint every N steps.")
    resume: bool = Field(default=True, description="Continue from the last checkpoint in output_dir if there is one.")
    record_tokens: bool = Field(
        default=True,
        description="Append each episode's token ids, logprobs, env mask, reward and hinted turns to "
        "output_dir/episode_tokens.jsonl, which `regrow traces export --tokens` joins to the server's traces and "
        "`regrow bench gpu --tokens` replays.",
    )
    seed: int = Field(default=0, description="Seeds task sampling, rollouts and the trainer.")
    episode_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description="Longest wait for a step's groups, backoff included; the run fails past it with each server's "
        "state.",
    )
    episode_retries: int = Field(
        default=2,
        ge=0,
        description="Replays of an episode the env lost (sandbox gone, dropped connection) before "
        "its group is dropped.",
    )
    env_backoff_max_s: float = Field(
        default=30.0, gt=0, description="Longest pause between tries when the env is at capacity or down."
    )
    env_outage_s: float = Field(
        default=300.0, gt=0, description="Fail when no env server could start an episode for this long."
    )
    env_health_interval_s: float = Field(
        default=5.0, gt=0, description="Seconds between reads of each env server's /health (its free slots)."
    )
    vllm_server: str | None = Field(
        default=None,
        description="vLLM server (http://host:8100, from `trl vllm-serve`) that generates the turns; the trainer "
        "pushes its weights to it every step. None: the HF model generates.",
    )
    vllm_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest wait for the vLLM server to answer at startup.",
    )

    @field_validator("env", mode="before")
    @classmethod
    def _env_urls(cls, value: str | list[str]) -> list[str]:
        if not value:  # said after the other fields, since --plan needs no env
            return []
        return env_urls(value)

    @field_validator("vllm_server")
    @classmethod
    def _vllm_base_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.rstrip("/").endswith("/v1"):
            raise ValueError(f"--vllm-server {url!r}: give the server's base URL, e.g. http://localhost:8100")
        return url.rstrip("/")

    @model_validator(mode="after")
    def _lora_rate_unless_given(self) -> "TrainSettings":
        if self.lora_r and "learning_rate" not in self.model_fields_set:
            self.learning_rate = LORA_LEARNING_RATE
            self._lora_rate_by_default = True
        return self

    @property
    def drops_uniform_groups(self) -> bool:
        """Whether the stream drops groups whose rewards are all equal (see `uniform_groups`)."""
        return self.uniform_groups == "drop" or (self.uniform_groups == "auto" and not self.alpha_sdpo)

    @property
    def env_retries(self) -> EnvRetries:
        """How the rollout workers ride out env faults: --episode-retries and the --env-* pauses."""
        return EnvRetries(self.episode_retries, self.env_backoff_max_s, self.env_outage_s, self.env_health_interval_s)

    def weights_dtype_on(self, device: str, pairs_dtype: str | None = None, sharding: str = "none") -> str:
        """The dtype the policy's weights load in on `device`: as asked, else the DPO pairs' reference dtype
        (their logprobs must be the loaded policy's), else bfloat16 on a GPU and float32 on a CPU. Under FSDP with
        bf16 compute, trained weights are float32: accelerate (1.15, fsdp2_prepare_model) makes them so to shard them,
        so loading them in bf16 would only write a second copy."""
        if self.weights_dtype != "auto":
            return self.weights_dtype
        if pairs_dtype is not None:
            return pairs_dtype
        if sharding == "fsdp" and self.bf16 and not self.lora_r:
            return "float32"
        return "bfloat16" if device == "cuda" else "float32"

    @property
    def lora_rate_by_default(self) -> bool:
        """Whether the learning rate is the LoRA default, chosen because none was given."""
        return self._lora_rate_by_default

    @model_validator(mode="after")
    def _env_unless_planning(self) -> "TrainSettings":
        if not self.env and not self.plan:
            raise ValueError(
                "env: give the env server's URL with --env http://host:port (or REGROW_TRAIN_ENV); "
                "--plan alone needs none"
            )
        return self

    @model_validator(mode="after")
    def _vllm_needs_cuda(self) -> "TrainSettings":
        if self.vllm_server and self.device == "cpu":
            raise ValueError(
                "--vllm-server needs a CUDA device: the trainer pushes its weights to the server over NCCL; "
                "use --device cuda (or auto on a GPU machine), or drop --vllm-server"
            )
        return self
