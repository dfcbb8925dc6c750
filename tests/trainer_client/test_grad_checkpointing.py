"""Gradient checkpointing beside the in-process sampler: the step's forward is checkpointed, and the sampler, which
generates from the same model in training mode, keeps its KV cache."""

import inspect
import threading

import pytest
import torch

from tests.trainer_client.tiny_policy import tiny_qwen2, train_tokenizer
from trainer_client.policy.grad_checkpointing import (
    _STORED,
    _CheckpointingWhileRecording,
    checkpoint_only_while_recording,
)
from trainer_client.rollout.hf_sampler import HFTurnSampler

pytestmark = pytest.mark.train


def _as_transformers_left_it(model, monkeypatch) -> None:
    """Undo, for this test, a patch an earlier test of this process put on the model's classes (it is per class)."""
    for klass in {type(module) for module in model.modules()}:
        if isinstance(inspect.getattr_static(klass, "gradient_checkpointing", None), _CheckpointingWhileRecording):
            for module in (module for module in model.modules() if type(module) is klass):
                module.__dict__["gradient_checkpointing"] = module.__dict__.pop(_STORED, False)
            monkeypatch.delattr(klass, "gradient_checkpointing")


def _checkpointed_policy(monkeypatch=None):
    tokenizer = train_tokenizer()
    model = tiny_qwen2(tokenizer)
    if monkeypatch is not None:
        _as_transformers_left_it(model, monkeypatch)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return tokenizer, model


def _sample_in_a_thread(model, tokenizer):
    sampler = HFTurnSampler(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], max_batch=2)
    found: dict = {}

    def run():
        try:
            found["turns"] = sampler.generate_batch([[5, 6, 7], [8, 9]], [4, 3])
        except Exception as error:  # handed back to the test
            found["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    return found


def test_a_checkpointed_policy_in_training_mode_loses_the_samplers_cache_unless_the_flag_follows_grad_mode(
    monkeypatch,
):
    checkpoint_only_while_recording(tiny_qwen2(train_tokenizer()))  # as an earlier test of this process may have
    tokenizer, model = _checkpointed_policy(monkeypatch)
    assert "no KV cache" in str(_sample_in_a_thread(model, tokenizer).get("error"))

    assert checkpoint_only_while_recording(model) >= 2  # the decoder layer and the backbone
    found = _sample_in_a_thread(model, tokenizer)
    assert "error" not in found, found
    assert [len(turn.ids) for turn in found["turns"]] <= [4, 3]
    assert all(turn.ids for turn in found["turns"])


def test_the_steps_forward_is_still_checkpointed_and_its_gradients_are_the_plain_ones():
    _, model = _checkpointed_policy()
    checkpoint_only_while_recording(model)
    layers = model.model.layers
    calls = []
    for layer in layers:
        inner = layer._gradient_checkpointing_func
        layer._gradient_checkpointing_func = lambda *a, _inner=inner, **k: calls.append(1) or _inner(*a, **k)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    model(input_ids=ids, labels=ids).loss.backward()
    checkpointed = {name: p.grad.clone() for name, p in model.named_parameters()}
    assert len(calls) == len(layers)  # each layer's forward went through the checkpoint
    with torch.no_grad():
        model(input_ids=ids)
    assert len(calls) == len(layers)  # no grad, nothing to recompute: no checkpoint

    model.zero_grad()
    model.gradient_checkpointing_disable()
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(torch.allclose(p.grad, checkpointed[name], atol=1e-6) for name, p in model.named_parameters())
