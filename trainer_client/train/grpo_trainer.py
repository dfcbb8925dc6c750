"""The regrow trainer: TRL's GRPOTrainer with SDPO and replay-DPO added to the same step.

  L = L_rlvr + alpha_sdpo * L_sdpo + beta_dpo * L_dpo

L_rlvr is GRPOTrainer's own loss (Dr.GRPO by default); each extra channel runs only when its weight
is non-zero, so with both weights at zero the step is exactly GRPOTrainer's. Each term is logged
by name: `rlvr/loss`, `sdpo/loss`, `sdpo/distilled_tokens`, `dpo/loss`, `dpo/rewards/margins`, ...
"""

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from trainer_client.channels.dpo_loss import sigmoid_dpo_loss
from trainer_client.channels.hinted_self import SDPOTeacher, TeacherWeights, teacher_row
from trainer_client.channels.preference_pairs import EncodedPair, PreferencePair, encode_pair
from trainer_client.channels.sdpo_loss import sdpo_token_loss
from trainer_client.train.policy_forward import head_logits, pair_logps
from trainer_client.train.prefix_cache import Prefix, RecordedForward, recorded_forward
from trainer_client.train.settings import TrainSettings

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
            "help": "Off: rollout workers generate with the live model, and checkpointing disables its KV cache."
        },
    )
    sdpo_ema_decay: float = field(default=0.99, metadata={"help": "EMA decay when sdpo_teacher='ema'."})


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

    alpha_sdpo: float = _declared_in_settings("alpha_sdpo")
    sdpo_teacher: Literal["live", "ema", "initial"] = _declared_in_settings("sdpo_teacher")
    sdpo_jsd_alpha: float = _declared_in_settings("sdpo_jsd_alpha")
    sdpo_top_k: int | None = _declared_in_settings("sdpo_top_k")
    sdpo_importance_clip: float = _declared_in_settings("sdpo_importance_clip")
    beta_dpo: float = _declared_in_settings("beta_dpo")
    dpo_beta: float = _declared_in_settings("dpo_beta")
    dpo_context_grad: bool = _declared_in_settings("dpo_context_grad")


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
        self, model, args: RegrowGRPOConfig, pair_batches: Iterator[list[PreferencePair]] | None = None, **kwargs
    ):
        # The teacher copies the weights before GRPOTrainer patches the model's forward.
        self.sdpo_teacher = (
            SDPOTeacher(TeacherWeights(args.sdpo_teacher), model, args.sdpo_ema_decay) if args.alpha_sdpo else None
        )
        if args.beta_dpo and pair_batches is None:
            raise ValueError("beta_dpo > 0 needs preference pairs: pass --pairs pairs.jsonl")
        self.pair_batches = pair_batches if args.beta_dpo else None
        self._encoded_pairs: dict[tuple[str, int, str], EncodedPair] = {}
        super().__init__(model=model, args=args, **kwargs)
        self.add_callback(_TeacherFollowsPolicy(self))

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        # rollout_func's extra fields were merged into `inputs`; carry the hinted turns to the loss
        output["sdpo_turns"] = [row.get("sdpo_turns") or [] for row in inputs]
        return output

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        sdpo_on = bool(self.args.alpha_sdpo) and any(inputs.get("sdpo_turns") or [])
        recorded = RecordedForward()
        if sdpo_on or self.pair_batches is not None:
            # the extra channels reuse this forward's hidden states and keys and values
            keep_prefix = self.pair_batches is not None or self.sdpo_teacher.weights is TeacherWeights.live
            with recorded_forward(self.accelerator.unwrap_model(model), keep_prefix) as recorded:
                loss = super()._compute_loss(model, inputs)
        else:
            loss = super()._compute_loss(model, inputs)
        self._metrics[mode]["rlvr/loss"].append(loss.item() * accumulation)
        # the extra channels call the unwrapped backbone, so they need the autocast that wraps the forward they continue
        with self.accelerator.autocast():
            if self.args.alpha_sdpo:
                sdpo = self._sdpo_loss(model, inputs, recorded.hidden[-1] if sdpo_on else None, mode, recorded.prefix)
                if sdpo is not None:
                    loss = loss + self.args.alpha_sdpo * sdpo / accumulation
            if self.pair_batches is not None:
                loss = loss + self.args.beta_dpo * self._dpo_loss(model, mode, recorded.prefix) / accumulation
        return loss

    def _sdpo_loss(
        self, model, inputs, hidden: torch.Tensor | None, mode: str, student_prefix: Prefix | None = None
    ) -> torch.Tensor | None:
        """Mean SDPO loss over this batch's distilled tokens, or None when no turn is hinted.

        `hidden` holds the student forward's last hidden states; it is None when no row has a hinted turn.
        """
        policy = self.accelerator.unwrap_model(model)
        prompt_width = inputs["prompt_ids"].size(1)
        student_rows, teacher_rows, tokens, rollout_logps = [], [], [], []
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
                student_rows.append(hidden[row, prompt_width + turn.start - 1 : prompt_width + end - 1])
                teacher_rows.append(teacher_row(row, prompt_width, prompt, completion, turn, end))
                tokens.append(inputs["completion_ids"][row, turn.start : end])
                rollout_logps.append(inputs["sampling_per_token_logps"][row, turn.start : end])
        self._metrics[mode]["sdpo/distilled_tokens"].append(float(sum(row.count for row in teacher_rows)))
        self._metrics[mode]["sdpo/hinted_turns"].append(float(len(teacher_rows)))
        if not teacher_rows:
            self._metrics[mode]["sdpo/loss"].append(0.0)
            return None
        assert self.sdpo_teacher is not None  # made whenever alpha_sdpo > 0, the only case that calls this
        student_logits = head_logits(policy, torch.cat(student_rows), self.temperature)
        teacher_logits = self.sdpo_teacher.logits(
            policy, teacher_rows, self._pad_token_id, self.temperature, student_prefix
        )
        result = sdpo_token_loss(
            student_logits,
            teacher_logits,
            torch.cat(tokens),
            torch.cat(rollout_logps),
            jsd_alpha=self.args.sdpo_jsd_alpha,
            top_k=self.args.sdpo_top_k,
            importance_clip=self.args.sdpo_importance_clip,
        )
        loss = result.per_token.mean()
        self._metrics[mode]["sdpo/loss"].append(loss.item())
        self._metrics[mode]["sdpo/importance_ratio_mean"].append(result.importance_ratio.mean().item())
        return loss

    def _dpo_loss(self, model, mode: str, batch_prefix: Prefix | None = None) -> torch.Tensor:
        """The sigmoid DPO loss on the next batch of replay pairs, logged under TRL's DPO names."""
        assert self.pair_batches is not None  # set whenever beta_dpo > 0, the only case that calls this
        pairs = [self._encoded(pair) for pair in next(self.pair_batches)]
        chosen, rejected = pair_logps(
            self.accelerator.unwrap_model(model),
            [(p.prompt_ids, p.chosen_ids, p.rejected_ids) for p in pairs],
            self._pad_token_id,
            prefix=batch_prefix,
            context_grad=self.args.dpo_context_grad,
        )
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
        return dpo.loss

    def _encoded(self, pair: PreferencePair) -> EncodedPair:
        key = (pair.trace_id, pair.step_index, pair.chosen_text)
        if key not in self._encoded_pairs:
            self._encoded_pairs[key] = encode_pair(pair, self.processing_class)
        return self._encoded_pairs[key]

    @property
    def _pad_token_id(self) -> int:
        return self._tokenizer.pad_token_id
