"""The regrow trainer: TRL's GRPOTrainer with SDPO and replay-DPO added to the same step.

  L = L_rlvr + alpha_sdpo * L_sdpo + beta_dpo * L_dpo

L_rlvr is GRPOTrainer's own loss (Dr.GRPO by default); each extra channel runs only when its weight
is non-zero, so with both weights at zero the step is exactly GRPOTrainer's. All three are on
Dr.GRPO's scale, a sum over tokens (SDPO) or pairs (DPO) divided by B * L_max, so that alpha and beta
weigh a token against an RLVR token whatever the batch holds. Without vLLM, the sampler's own logprobs
are PPO's old logprobs (`importance_correction`). Each term is logged by name, with its gradient norm:
`rlvr/loss`, `rlvr/grad_norm`, `sdpo/loss`, `sdpo/grad_norm`, `sdpo/distilled_tokens`, `dpo/loss`, ...
With `channel_weights="auto"`, alpha and beta are instead the wanted ratio of each channel's gradient norm to RLVR's,
and the multipliers follow the norms each step measures (`sdpo/weight`, `dpo/weight`).
"""

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Literal, cast

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from proto import is_pass
from trainer_client.channels.dpo_loss import sigmoid_dpo_loss
from trainer_client.channels.hinted_self import SDPOTeacher, TeacherWeights, teacher_row
from trainer_client.channels.preference_pairs import EncodedPair, PreferencePair, encode_pair
from trainer_client.channels.sdpo_loss import sdpo_token_loss
from trainer_client.policy.even_forwards import Forwards, agreed_most, counted_forwards, is_sharded, make_up_forwards
from trainer_client.policy.policy_forward import head_logits, pair_forwards_at_most, pair_logps
from trainer_client.policy.prefix_cache import Prefix, recorded_forward
from trainer_client.rollout.rows import RolloutRow
from trainer_client.train.channel_gradients import ChannelGradients, next_weight
from trainer_client.train.settings import TrainSettings
from trainer_client.train.silent_steps import SilentStepsSkipped

logger = logging.getLogger(__name__)


@dataclass
class _DrGRPOConfig(GRPOConfig):
    """GRPOConfig with Dr.GRPO's defaults, and what only the trainer needs."""

    loss_type: str = field(
        default="dr_grpo", metadata={"help": "TRL loss; Dr.GRPO by default, any TRL objective works."}
    )
    scale_rewards: str = field(default="none", metadata={"help": "Dr.GRPO does not divide advantages by the std."})
    beta: float = field(default=0.0, metadata={"help": "KL to a reference model; 0 loads no reference model."})
    gradient_checkpointing: bool = field(
        default=False,
        metadata={
            "help": "Recompute activations in the backward; the in-process sampler keeps its KV cache "
            "(trainer_client.policy.grad_checkpointing)."
        },
    )
    sdpo_ema_decay: float = field(default=0.99, metadata={"help": "EMA decay when sdpo_teacher='ema'."})
    delta: float | None = field(
        default=3.0,
        metadata={
            "help": "Cap of the PPO ratio (TRL's two-sided clipping). With the sampler's logprobs as old ones, "
            "a stale token whose ratio passes it gets no gradient, as TRL's vLLM path caps its IS ratio at 3."
        },
    )


def _declared_in_settings(name: str) -> Any:
    """A dataclass field with the default and help that TrainSettings declares for `name`."""
    declared = TrainSettings.model_fields[name]
    return field(default=declared.default, metadata={"help": declared.description})


@dataclass
class RegrowGRPOConfig(_DrGRPOConfig):
    """GRPOConfig with Dr.GRPO defaults and the settings of the SDPO and DPO channels.

    The channels' settings are declared once, in TrainSettings (CLI, environment, config file): each field here takes
    its default and help from there, and a unit test checks that its type is the declared one.
    """

    importance_correction: bool = _declared_in_settings("importance_correction")
    alpha_sdpo: float = _declared_in_settings("alpha_sdpo")
    channel_weights: Literal["fixed", "auto"] = _declared_in_settings("channel_weights")
    sdpo_teacher: Literal["live", "ema", "initial"] = _declared_in_settings("sdpo_teacher")
    sdpo_jsd_alpha: float = _declared_in_settings("sdpo_jsd_alpha")
    sdpo_top_k: int | None = _declared_in_settings("sdpo_top_k")
    sdpo_importance_clip: float = _declared_in_settings("sdpo_importance_clip")
    beta_dpo: float = _declared_in_settings("beta_dpo")
    dpo_beta: float = _declared_in_settings("dpo_beta")
    dpo_context_grad: bool = _declared_in_settings("dpo_context_grad")


# The stream's running totals logged as rollout/*: the replays, drops and waits that env faults and flat groups caused.
STREAM_COUNTERS = (
    "episode_retries",
    "groups_dropped_lost",
    "groups_dropped_uniform",
    "capacity_waits",
    "unavailable_waits",
    "backoff_s",
)
_INHERITED = {f.name for f in fields(_DrGRPOConfig)}
# The fields RegrowGRPOConfig adds: the settings TrainSettings hands to the TRL config unchanged.
CHANNEL_SETTINGS = tuple(f.name for f in fields(RegrowGRPOConfig) if f.name not in _INHERITED)


class _TeacherFollowsPolicy(TrainerCallback):
    def __init__(self, trainer: "RegrowGRPOTrainer"):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        if self.trainer.sdpo_teacher is not None:
            self.trainer.sdpo_teacher.update(self.trainer.accelerator.unwrap_model(self.trainer.model))


class RegrowGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose loss adds SDPO on hinted turns and DPO on replay pairs."""

    args: RegrowGRPOConfig

    def __init__(
        self,
        model,
        args: RegrowGRPOConfig,
        pair_batches: Iterator[list[PreferencePair]] | None = None,
        weights_lock: "threading.Lock | None" = None,
        **kwargs,
    ):
        # The teacher copies the weights before GRPOTrainer patches the model's forward; it holds the in-process
        # sampler's `weights_lock` while it swaps the policy's adapter.
        teacher = TeacherWeights(args.sdpo_teacher)
        self.sdpo_teacher = SDPOTeacher(teacher, model, args.sdpo_ema_decay, weights_lock) if args.alpha_sdpo else None
        if args.beta_dpo and pair_batches is None:
            raise ValueError("beta_dpo > 0 needs preference pairs: pass --pairs pairs.jsonl")
        self.pair_batches = pair_batches if args.beta_dpo else None
        self._encoded_pairs: dict[tuple[str, int, str], EncodedPair] = {}
        self._gradients = ChannelGradients()
        # What multiplies each extra channel's loss: its fixed weight, or (auto) one the measured norms steer.
        self.channel_target = {"sdpo": args.alpha_sdpo, "dpo": args.beta_dpo}
        self.channel_weight = dict(self.channel_target)
        super().__init__(model=model, args=args, **kwargs)
        self.add_callback(_TeacherFollowsPolicy(self))
        self.silent_steps = SilentStepsSkipped(self.accelerator, self._metrics["train"])
        if not self.is_deepspeed_enabled:  # DeepSpeed keeps the gradients and steps in its own engine, not here
            self.add_callback(self.silent_steps)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        rows = cast(list[RolloutRow], inputs)  # rollout_func's fields were merged into each of them
        output["sdpo_turns"] = [row.get("sdpo_turns") or [] for row in rows]  # carried to the loss
        versions = [row.get("policy_version") for row in rows]
        if all(version is not None for version in versions):
            staleness = [float(self.state.global_step - version) for version in versions]
            self._metrics[mode]["rollout/staleness_mean"].append(sum(staleness) / len(staleness))
            self._metrics[mode]["rollout/staleness_max"].append(max(staleness))
        rewards = [row.get("env_reward") for row in rows]
        if rewards and all(reward is not None for reward in rewards):  # solved: every FAIL_TO_PASS test passes
            self._metrics[mode]["rollout/pass_rate"].append(sum(map(is_pass, rewards)) / len(rewards))
        counters = rows[0].get("stream_counters") if rows else None
        if counters is not None:
            for name in STREAM_COUNTERS:
                self._metrics[mode][f"rollout/{name}"].append(counters[name])
        sampled = output.get("sampling_per_token_logps")
        if sampled is None:
            return output
        # vLLM sends None (NaN here) for a logprob it could not compute; such a token has no importance weight
        policy_tokens = output["completion_mask"] * output.get("tool_mask", 1)
        unscored = ~torch.isfinite(sampled) & policy_tokens.bool()
        self._metrics[mode]["sampling/nan_tokens_dropped"].append(float(unscored.sum()))
        output["sampling_per_token_logps"] = sampled.masked_fill(~torch.isfinite(sampled), 0.0)
        output["sampling_unscored"] = unscored
        if self.args.importance_correction and not self.use_vllm:
            # the policy that sampled each token is PPO's old policy: TRL then clips pi_theta / pi_sampler
            output["old_per_token_logps"] = output["sampling_per_token_logps"]
            output["tool_mask"] = policy_tokens * ~unscored
        return output

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        norms = self._gradients.norms()  # the hooks ran during this step's backward
        if self.accelerator.num_processes > 1:  # every rank steers its weights by the same numbers (a collective)
            names = ["rlvr", "sdpo", "dpo"]
            squares = torch.tensor([norms.get(name, 0.0) ** 2 for name in names], device=self.accelerator.device)
            norms = dict(zip(names, self.accelerator.reduce(squares, "mean").sqrt().tolist(), strict=True))
        for channel, norm in norms.items():
            self._metrics["train"][f"{channel}/grad_norm"].append(norm)
        targets = self.channel_target
        for channel, weight in self.channel_weight.items():
            if self.args.channel_weights == "auto" and targets[channel]:
                self.channel_weight[channel] = next_weight(
                    weight, targets[channel], norms.get("rlvr", 0.0), norms.get(channel, 0.0)
                )
            if targets[channel]:
                self._metrics["train"][f"{channel}/weight"].append(weight)  # the weight this step trained with
        return loss

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        sdpo_on = bool(self.args.alpha_sdpo) and any(inputs.get("sdpo_turns") or [])
        # the extra channels reuse this forward's hidden states and keys and values; RLVR's gradient is read there
        keep_prefix = self.pair_batches is not None or (
            sdpo_on and self.sdpo_teacher is not None and self.sdpo_teacher.weights is TeacherWeights.live
        )
        policy = self.accelerator.unwrap_model(model)
        with recorded_forward(policy, keep_prefix) as recorded:
            loss = super()._compute_loss(model, inputs)
        if recorded.hidden:
            self._gradients.watch_batch(recorded.hidden[-1])
        self._metrics[mode]["rlvr/loss"].append(loss.item() * accumulation)
        # the extra channels call the unwrapped backbone, so they need the autocast that wraps the forward they continue
        with self.accelerator.autocast():
            if self.args.alpha_sdpo:
                sdpo = self._sdpo_loss(model, inputs, recorded.hidden[-1] if sdpo_on else None, mode, recorded.prefix)
                if sdpo is not None:
                    loss = loss + self.channel_weight["sdpo"] * sdpo / accumulation
            if self.pair_batches is not None:
                with self._gradients.head_inputs(policy, "dpo"):
                    dpo, pairs = self._dpo_loss(model, mode, recorded.prefix)
                # DPO's loss is a mean over its pairs; a sum over pairs / (B * L_max) puts it on Dr.GRPO's scale
                scale = pairs / self._dr_grpo_denominator(inputs)
                loss = loss + self.channel_weight["dpo"] * dpo * scale / accumulation
        return loss

    def _dr_grpo_denominator(self, inputs) -> int:
        """B * L_max, what Dr.GRPO divides its token sum by: rows in this batch times the longest completion allowed."""
        return inputs["completion_ids"].size(0) * self.max_completion_length

    def _sdpo_loss(
        self, model, inputs, hidden: torch.Tensor | None, mode: str, student_prefix: Prefix | None = None
    ) -> torch.Tensor | None:
        """SDPO loss of this batch, summed over its distilled tokens / (B * L_max); None when no turn is hinted.

        `hidden` holds the student forward's last hidden states; it is None when no row has a hinted turn.
        """
        policy = self.accelerator.unwrap_model(model)
        prompt_width = inputs["prompt_ids"].size(1)
        width = prompt_width + inputs["completion_ids"].size(1)
        unscored = inputs.get("sampling_unscored")
        student_rows: list[int] = []
        teacher_rows, tokens, rollout_logps, scored = [], [], [], []
        for row, turns in enumerate(inputs["sdpo_turns"]):
            if not turns:
                continue
            assert hidden is not None  # the caller passes the recorded forward's states whenever a turn is hinted
            prompt = inputs["prompt_ids"][row][inputs["prompt_mask"][row].bool()].tolist()
            completion = inputs["completion_ids"][row].tolist()
            valid = int(inputs["completion_mask"][row].sum())
            for turn in turns:
                end = min(turn.end, valid)
                if end <= turn.start:
                    continue
                # hidden state at t predicts token t+1
                first = row * width + prompt_width + turn.start - 1
                student_rows += range(first, first + end - turn.start)
                teacher_rows.append(teacher_row(row, prompt_width, prompt, completion, turn, end))
                tokens.append(inputs["completion_ids"][row, turn.start : end])
                rollout_logps.append(inputs["sampling_per_token_logps"][row, turn.start : end])
                # a token whose sampling logprob is unknown has no importance weight: it is left out
                scored.append(
                    torch.ones(end - turn.start, dtype=torch.bool, device=hidden.device)
                    if unscored is None
                    else ~unscored[row, turn.start : end]
                )
        self._metrics[mode]["sdpo/hinted_turns"].append(float(len(teacher_rows)))
        teacher_logits = self._teacher_logits(policy, teacher_rows, student_prefix)  # on every rank of a sharded one
        if teacher_logits is None:
            self._metrics[mode]["sdpo/distilled_tokens"].append(0.0)
            self._metrics[mode]["sdpo/loss"].append(0.0)
            return None
        keep = torch.cat(scored)
        self._metrics[mode]["sdpo/distilled_tokens"].append(float(keep.sum()))
        assert hidden is not None  # the caller passes the recorded forward's states whenever a turn is hinted
        index = torch.tensor(student_rows, dtype=torch.long, device=hidden.device)
        student_logits = head_logits(policy, self._gradients.sdpo_rows(hidden, index), self.temperature)
        result = sdpo_token_loss(
            student_logits,
            teacher_logits,
            torch.cat(tokens),
            torch.cat(rollout_logps),
            jsd_alpha=self.args.sdpo_jsd_alpha,
            top_k=self.args.sdpo_top_k,
            importance_clip=self.args.sdpo_importance_clip,
        )
        per_token = torch.where(keep, result.per_token, 0.0)
        loss = per_token.sum() / self._dr_grpo_denominator(inputs)
        self._metrics[mode]["sdpo/loss"].append(loss.item())
        if keep.any():
            self._metrics[mode]["sdpo/divergence_mean"].append(result.per_token[keep].mean().item())
            self._metrics[mode]["sdpo/importance_ratio_mean"].append(result.importance_ratio[keep].mean().item())
        return loss

    def _teacher_logits(self, policy, rows: list, student_prefix: Prefix | None) -> torch.Tensor | None:
        """The SDPO teacher's logits for the hinted turns `rows`; None without any. With sharded weights, every rank
        runs as many teacher forwards as the rank with the most turns (one that has fewer makes up the rest)."""
        teacher = self.sdpo_teacher
        assert teacher is not None  # set whenever alpha_sdpo > 0, the only case that calls this
        due = None
        if is_sharded(policy):
            passes = teacher.passes(len(rows), student_prefix is not None)
            due = Forwards(no_grad=agreed_most(passes, self.accelerator.device))
        with counted_forwards(policy) as ran:
            logits = (
                teacher.logits(policy, rows, self._pad_token_id, self.temperature, student_prefix) if rows else None
            )
        if due is not None:
            make_up_forwards(policy, ran, due, self._pad_token_id)
        return logits

    def _dpo_loss(self, model, mode: str, batch_prefix: Prefix | None = None) -> tuple[torch.Tensor, int]:
        """The sigmoid DPO loss (a mean) on the next batch of replay pairs, logged under TRL's DPO names, and how many
        pairs it averages."""
        assert self.pair_batches is not None  # set whenever beta_dpo > 0, the only case that calls this
        pairs = [self._encoded(pair) for pair in next(self.pair_batches)]
        policy = self.accelerator.unwrap_model(model)
        sharded = is_sharded(policy)
        with counted_forwards(policy) as ran:
            chosen, rejected = pair_logps(
                policy,
                [(p.prompt_ids, p.chosen_ids, p.rejected_ids) for p in pairs],
                self._pad_token_id,
                prefix=batch_prefix,
                context_grad=self.args.dpo_context_grad,
                share_start=not sharded,
            )
        # with sharded weights every rank runs the most forwards pairs can take, whatever its own pairs took
        made_up = None
        if sharded:
            due = pair_forwards_at_most(self.args.dpo_context_grad, share_start=False)
            made_up = make_up_forwards(policy, ran, due, self._pad_token_id)
        device = chosen.device
        dpo = sigmoid_dpo_loss(
            chosen,
            rejected,
            torch.tensor([p.reference_chosen_logp for p in pairs], device=device),
            torch.tensor([p.reference_rejected_logp for p in pairs], device=device),
            beta=self.args.dpo_beta,
        )
        for name, value in dpo.metrics().items():
            self._metrics[mode][f"dpo/{name}"].append(value)
        self._metrics[mode]["dpo/pairs"].append(float(len(pairs)))
        return (dpo.loss if made_up is None else dpo.loss + made_up), len(pairs)

    def _encoded(self, pair: PreferencePair) -> EncodedPair:
        key = (pair.trace_id, pair.step_index, pair.chosen_text)
        if key not in self._encoded_pairs:
            self._encoded_pairs[key] = encode_pair(pair, self.processing_class)
        return self._encoded_pairs[key]

    @property
    def _pad_token_id(self) -> int:
        return self._tokenizer.pad_token_id
