"""LoRA through peft on the tiny Qwen2: the step trains the adapter alone, and SDPO's teacher is the policy's own
weights with the adapter off (initial) or averaged (EMA), never a second copy of the model."""

import copy
import math

import pytest
import torch

from tests.trainer_client.test_trainer_step import SCRIPTS, build, config
from tests.trainer_client.tiny_policy import tiny_qwen2
from trainer_client.channels.hinted_self import SDPOTeacher, TeacherWeights
from trainer_client.policy.lora_adapter import adapter_parameters, causal_lm, with_lora

pytestmark = pytest.mark.train

IDS = [[5, 9, 14, 3, 7, 11, 2, 8]]


def _adapted(tokenizer, r=4):
    return with_lora(tiny_qwen2(tokenizer), r=r, alpha=None, dropout=0.0, target_modules="all-linear")


def _logits(model):
    with torch.no_grad():
        return model(input_ids=torch.tensor(IDS)).logits


def _nudge_adapter(model, by: float) -> None:
    with torch.no_grad():
        for tensor in adapter_parameters(model).values():
            tensor.add_(by)


def test_the_adapter_starts_as_a_no_op_and_only_it_trains(tokenizer):
    base = tiny_qwen2(tokenizer)
    before = _logits(base)
    policy = with_lora(copy.deepcopy(base), r=4, alpha=None, dropout=0.0, target_modules="all-linear")
    torch.testing.assert_close(_logits(policy), before)
    trainable = adapter_parameters(policy)
    assert trainable and all("lora_" in name for name in trainable)
    total = sum(p.numel() for p in policy.parameters())
    assert sum(p.numel() for p in trainable.values()) < total / 5


def test_the_initial_teacher_is_the_adapter_switched_off_with_no_copy(tokenizer):
    policy = _adapted(tokenizer)
    start = _logits(policy)
    teacher = SDPOTeacher(TeacherWeights.initial, policy)
    _nudge_adapter(policy, 0.05)
    assert not torch.allclose(_logits(policy), start)
    with teacher.teacher(policy) as model:
        assert model is policy  # the same tensors, not a second model
        torch.testing.assert_close(_logits(model), start)
    assert not torch.allclose(_logits(policy), start)  # the adapter is on again afterwards
    assert teacher._copy is None


def test_the_ema_teacher_averages_the_adapter_and_gives_the_live_one_back(tokenizer):
    policy = _adapted(tokenizer)
    teacher = SDPOTeacher(TeacherWeights.ema, policy, ema_decay=0.5)
    first = {name: tensor.detach().clone() for name, tensor in adapter_parameters(policy).items()}
    _nudge_adapter(policy, 0.2)
    teacher.update(policy)
    live = _logits(policy)
    with teacher.teacher(policy) as model:
        for name, tensor in adapter_parameters(model).items():
            torch.testing.assert_close(tensor, first[name] + 0.1)
    torch.testing.assert_close(_logits(policy), live)
    assert teacher._copy is None


@pytest.mark.parametrize("teacher", ["initial", "live", "ema"])  # live continues the student's own prefix cache
def test_a_lora_step_with_sdpo_moves_the_adapter_and_leaves_the_weights(
    tmp_path, tokenizer, trajectories, episode_tokens, teacher
):
    from trainer_client.train.grpo_trainer import RegrowGRPOConfig, RegrowGRPOTrainer

    policy = _adapted(tokenizer)
    frozen = {name: p.detach().clone() for name, p in policy.named_parameters() if not p.requires_grad}
    adapter = {name: p.detach().clone() for name, p in adapter_parameters(policy).items()}
    trainer = build(
        RegrowGRPOTrainer,
        config(tmp_path, RegrowGRPOConfig, alpha_sdpo=1.0, sdpo_teacher=teacher),
        policy,
        tokenizer,
        trajectories,
        episode_tokens,
    )
    trainer.train()
    logged = next(e for e in trainer.state.log_history if "sdpo/loss" in e)
    assert logged["sdpo/distilled_tokens"] > 0 and math.isfinite(logged["sdpo/loss"])
    after = dict(policy.named_parameters())
    assert all(torch.equal(after[name], tensor) for name, tensor in frozen.items())
    assert any(not torch.equal(after[name], tensor) for name, tensor in adapter.items())
    assert causal_lm(policy).config.model_type == "qwen2"

    from trainer_client.policy.policy_loading import load_policy
    from trainer_client.train.training_policy import save_final

    save_final(trainer, tokenizer, tmp_path / "final")
    merged, _ = load_policy(str(tmp_path / "final"))  # a whole model: `--model final` needs no peft
    from peft import PeftModel

    # The same start weights with the saved adapter on them compute what the merged model does.
    adapted = PeftModel.from_pretrained(tiny_qwen2(tokenizer), str(tmp_path / "final" / "adapter")).eval()
    torch.testing.assert_close(_logits(merged), _logits(adapted), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(_logits(merged), _logits(tiny_qwen2(tokenizer)))


@pytest.fixture(scope="module")
def trajectories(scripted_env_url, tokenizer, episode_tokens):
    from tests.trainer_client.conftest import play_scripts

    return play_scripts(scripted_env_url, tokenizer, episode_tokens, SCRIPTS)


@pytest.mark.parametrize("weights", [TeacherWeights.initial, TeacherWeights.ema])
def test_no_turn_is_sampled_while_the_teacher_computes_with_the_policys_own_adapter_swapped(tokenizer, weights):
    """The initial teacher switches the live adapter off and the EMA one loads its average into it; the sampler
    thread, which generates from the same model, waits for the swap to end instead of sampling from the teacher."""
    import threading
    import time

    from peft.tuners.tuners_utils import BaseTunerLayer

    from trainer_client.rollout.hf_sampler import HFTurnSampler

    model = with_lora(tiny_qwen2(tokenizer), r=4, alpha=None, dropout=0.0, target_modules="all-linear")
    with torch.no_grad():  # an adapter that computes something, so that the EMA average differs from it
        for parameter in adapter_parameters(model).values():
            parameter.normal_(0, 0.1)
    lock = threading.Lock()
    teacher = SDPOTeacher(weights, model, ema_decay=0.5, weights_lock=lock)
    if weights is TeacherWeights.ema:
        with torch.no_grad():
            for parameter in adapter_parameters(model).values():
                parameter.add_(1.0)  # the live adapter moves away from the average the teacher keeps
    live = {name: p.detach().clone() for name, p in adapter_parameters(model).items()}

    def as_live() -> bool:
        layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)]
        switched_on = not any(layer.disable_adapters for layer in layers)
        same = all(torch.equal(p, live[name]) for name, p in adapter_parameters(model).items())
        return switched_on and same

    sampled_from = []
    hook = model.register_forward_pre_hook(
        lambda module, args: (
            sampled_from.append(as_live()) if threading.current_thread() is not threading.main_thread() else None
        )
    )
    sampler = HFTurnSampler(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], weights_lock=lock)
    turns = []
    thread = threading.Thread(target=lambda: turns.extend(sampler.generate_batch([[5, 6, 7]], [3])))
    with teacher.teacher(model):
        assert not as_live()  # the teacher's weights are in the model now
        thread.start()
        time.sleep(0.5)
    thread.join(timeout=60)
    hook.remove()

    assert turns and sampled_from and all(sampled_from)
