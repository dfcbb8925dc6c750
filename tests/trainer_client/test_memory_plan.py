"""`regrow train --plan`: the memory arithmetic against the shapes it ships and the targets it must meet (no GPU)."""

import pytest
from typer.testing import CliRunner

from regrow.cli import app
from trainer_client.train.memory_plan import GIB, ModelShape, RunShape, fitted_plan, plan_memory, shape_of

STEP = dict(rows=8, tokens_per_row=4096)  # the default step: 2 groups of 4, 3,072 completion tokens and a prompt


@pytest.mark.parametrize(
    ("name", "billions"), [("qwen2.5-0.5b", 0.494), ("qwen2.5-1.5b", 1.544), ("qwen2.5-7b", 7.616)]
)
def test_the_shipped_shapes_count_the_published_parameters(name, billions):
    assert shape_of(name).parameters / 1e9 == pytest.approx(billions, rel=0.005)


def test_7b_full_fine_tune_fits_eight_80gb_gpus_only_when_sharded():
    shape = shape_of("qwen2.5-7b")
    sharded = plan_memory(shape, RunShape(rows=1, tokens_per_row=4096, gpus=8, sharding="fsdp"), 80)
    assert sharded.fits
    assert sharded.parts["optimizer (AdamW)"] == pytest.approx(8 * shape.parameters / 8)
    copies = plan_memory(shape, RunShape(rows=1, tokens_per_row=4096, gpus=8, sharding="none"), 80)
    assert not copies.fits and "FSDP" in copies.remedy()


def test_7b_lora_fits_one_80gb_gpu_with_checkpointing_and_keeps_no_teacher_copy():
    shape = shape_of("qwen2.5-7b")
    lora = RunShape(**STEP, lora_r=16, gradient_checkpointing=True, sdpo_teacher="initial")
    plan = fitted_plan(shape, lora, 80)  # SDPO's logits of 8 rows at once alone take 132 GiB: micro-batches fit
    assert plan.fits and "SDPO teacher copy" not in plan.parts and plan.run.forward_rows < 8
    assert plan.parts["optimizer (AdamW)"] < 0.5 * GIB
    assert not plan_memory(shape, RunShape(**STEP, lora_r=16), 80).fits  # every activation of 8 x 4,096 tokens


def test_1_5b_full_fits_one_gpu_with_checkpointing_even_with_an_ema_teacher():
    shape = shape_of("qwen2.5-1.5b")
    plan = fitted_plan(shape, RunShape(**STEP, gradient_checkpointing=True, sdpo_teacher="ema"), 80)
    assert plan.fits
    assert plan.parts["SDPO teacher copy"] == pytest.approx(4 * shape.parameters)
    without = plan_memory(shape, RunShape(**STEP), 80)
    assert not without.fits and without.remedy().startswith("--micro-batch-rows 1; or --gradient-checkpointing")


def test_plan_needs_no_env_and_exits_1_with_the_remedy_when_it_does_not_fit():
    runner = CliRunner()
    fits = runner.invoke(app, ["train", "--plan", "--model", "qwen2.5-0.5b", "--lora-r", "8"], env={})
    assert fits.exit_code == 0, fits.output
    assert "fits" in fits.output and "does not fit" not in fits.output
    too_big = runner.invoke(app, ["train", "--plan", "--model", "qwen2.5-7b"], env={})
    assert too_big.exit_code == 1 and "does not fit: try --gradient-checkpointing" in too_big.output
    unknown = runner.invoke(app, ["train", "--plan", "--model", "no-such-model"], env={})
    assert unknown.exit_code == 1 and "qwen2.5-7b" in unknown.output


def test_bf16_weights_halve_what_the_weights_their_gradients_and_adamw_hold():
    shape = shape_of("qwen2.5-1.5b")
    full = plan_memory(shape, RunShape(**STEP, gradient_checkpointing=True), 80)
    half = plan_memory(shape, RunShape(**STEP, gradient_checkpointing=True, weight_bytes=2), 80)
    for part in ("weights", "gradients", "optimizer (AdamW)"):
        assert half.parts[part] == pytest.approx(full.parts[part] / 2)
    assert half.parts["optimizer (AdamW)"] == pytest.approx(4 * shape.parameters)


@pytest.mark.train
def test_the_policy_loads_in_bf16_when_asked(tmp_path):
    from tests.trainer_client.tiny_policy import save_tiny_policy
    from trainer_client.policy.policy_loading import load_policy

    folder = save_tiny_policy(tmp_path / "tiny")
    model, _ = load_policy(str(folder), "cpu", "bfloat16")
    assert {str(p.dtype) for p in model.parameters()} == {"torch.bfloat16"}


def test_a_cpu_step_holds_its_activations_in_fp32_and_more_than_a_gpus():
    shape = shape_of("smollm2")
    on_gpu = plan_memory(shape, RunShape(**STEP), 80)
    on_cpu = plan_memory(shape, RunShape(**STEP, activation_bytes=4, on_gpu=False), 24)
    assert on_cpu.parts["activations"] > 2 * on_gpu.parts["activations"]
    assert "this CPU host" in on_cpu.lines()[0]
    assert on_cpu.remedy().startswith("--micro-batch-rows 1; or fewer tokens a step (--max-completion-tokens")


# `regrow bench memory` on this 2-core host: the peak resident memory a real GRPO step adds (its second, with AdamW's
# state), of 2 rows of these lengths, in GiB. A random SmolLM2-shaped 6-layer model (h 384, i 1,024, SmolLM2's vocab)
# on unpadded rows: the fused LM head's tiles, not the layers, are most of it.
SIX_LAYERS = ModelShape("six-layer", 384, 1024, 6, 6, 2, 49152, True)
MEASURED_CPU_STEP_GIB = {424: 1.426, 1048: 2.821}


@pytest.mark.parametrize(("tokens_per_row", "measured_gib"), sorted(MEASURED_CPU_STEP_GIB.items()))
def test_the_cpu_plan_holds_measured_step_peaks_within_15_percent(tokens_per_row, measured_gib):
    run = RunShape(rows=2, tokens_per_row=tokens_per_row, turn_tokens=40, activation_bytes=4, on_gpu=False)
    planned = plan_memory(SIX_LAYERS, run, 24).modelled_bytes / GIB
    # over by the padded rows' attention mask these rows did not have, and the allocator's slack
    assert measured_gib <= planned <= 1.15 * measured_gib


def _cpu_settings(**overrides):
    from trainer_client.train.settings import TrainSettings

    return TrainSettings(model="smollm2", device="cpu", env=["http://127.0.0.1:1"], **overrides)


def test_a_cpu_run_past_the_host_memory_is_refused_before_the_model_loads():
    from trainer_client.train.memory_plan import check_memory

    # the run the kernel killed 9 minutes in, at 23 GiB: 2 groups of 4 at the default 4,096 completion tokens
    whole = _cpu_settings(group_size=4, groups_per_step=2, micro_batch_rows=8)
    with pytest.raises(RuntimeError, match="on this host, per process and there are 24 GiB: try --micro-batch-rows"):
        check_memory(whole, "cpu", host_gib=(24.0, 20.0))
    # with no --micro-batch-rows it runs the step in micro-batches small enough to fit
    assert check_memory(_cpu_settings(group_size=4, groups_per_step=2), "cpu", host_gib=(24.0, 20.0)) < 8


def test_the_cpu_run_the_kernel_killed_at_24_gib_after_a_plan_of_18_is_refused():
    from trainer_client.train.memory_plan import check_memory

    # 2 groups of 2, 1,536 completion tokens: planned 17.9 GiB before the CPU figures were measured, killed at 24 GiB
    killed = _cpu_settings(group_size=2, groups_per_step=2, max_completion_tokens=1536, micro_batch_rows=4)
    with pytest.raises(RuntimeError, match="on this host, per process and there are 24 GiB"):
        check_memory(killed, "cpu", host_gib=(24.0, 23.0))


def test_a_cpu_run_that_fits_the_host_but_not_its_free_memory_is_warned_of(caplog):
    from trainer_client.train.memory_plan import check_memory

    cpu_demo = _cpu_settings(group_size=2, groups_per_step=2, max_completion_tokens=1024)
    with caplog.at_level("WARNING", logger="trainer_client.train.memory_plan"):
        check_memory(cpu_demo, "cpu", host_gib=(24.0, 23.0))
        assert not caplog.records
        check_memory(cpu_demo, "cpu", host_gib=(24.0, 2.0))
    assert "the kernel may kill it mid-step" in caplog.text


def test_plan_with_device_cpu_is_held_against_this_host():
    result = CliRunner().invoke(app, ["train", "--plan", "--model", "smollm2", "--device", "cpu"], env={})
    assert "on this CPU host" in result.output
    assert result.exit_code == (0 if "fits" in result.output.splitlines()[-1] else 1)


def test_the_compose_trainer_services_defaults_fit_a_16_gib_host():
    # CI was refused at 23.6 GiB on a 23.5 GiB host: the service took the 3,072-token default made for a GPU.
    from pathlib import Path

    import yaml

    from trainer_client.train.memory_plan import fitted_plan, run_shape
    from trainer_client.train.settings import TrainSettings

    compose = yaml.safe_load((Path(__file__).parents[2] / "compose.yaml").read_text())
    environment = compose["services"]["trainer"]["environment"]
    defaults = {
        name.removeprefix("REGROW_TRAIN_").lower(): value.split(":-", 1)[1].rstrip("}")
        for name, value in environment.items()
        if ":-" in value
    }
    assert "max_completion_tokens" in defaults
    settings = TrainSettings(env="http://env-server:8000", **defaults)
    # as check_memory plans it: the whole step's 2 rows at once need 18 GiB (the fused head's tiles), so 1 at a time
    plan = fitted_plan(shape_of(settings.model), run_shape(settings, 1, "none", "cpu"), 16)
    assert plan.fits, "\n".join(plan.lines())


def test_on_a_cpu_the_lm_head_holds_tiles_of_trls_fused_head_capped_at_4096_positions():
    from trainer_client.train.memory_plan import head_parts

    shape = shape_of("smollm2")
    tiles = [
        head_parts(shape, RunShape(rows=2, tokens_per_row=tokens, activation_bytes=4, on_gpu=False))
        for tokens in (512, 2048, 4096)
    ]
    accumulator = shape.vocab * shape.hidden * 4  # the head weight's fp32 gradient
    assert tiles[0]["LM head tiles (fp32)"] == pytest.approx(8 * 1024 * 32768 * 4 + accumulator)
    assert tiles[1] == tiles[2]  # past 4,096 positions the head runs in chunks of that many
    with_sdpo = head_parts(shape, RunShape(rows=2, tokens_per_row=512, on_gpu=False, sdpo_teacher="live"))
    assert with_sdpo["logits (fp32)"] == pytest.approx(2 * 2 * 384 * shape.vocab * 4)  # student and teacher turns


# `regrow bench gpu` on an H200 (issue 43's note): 8 rows of 5,120 tokens (turns of 96, 3,744 distilled tokens a row at
# most) in bf16 autocast, fp32 weights but for 7B's LoRA over bf16 ones; "all" adds DPO's pairs to SDPO.
H200_PEAKS = [  # shape, LoRA rank, weight bytes, SDPO, rows at once, measured peak GiB
    ("qwen2.5-0.5b", 0, 4, False, 8, 68.46),
    ("qwen2.5-0.5b", 0, 4, True, 8, 117.25),  # the plan had said 64.2: one turn of SDPO logits, not every token's
    ("qwen2.5-0.5b", 0, 4, True, 2, 37.47),
    ("qwen2.5-1.5b", 0, 4, False, 2, 58.97),
    ("qwen2.5-1.5b", 0, 4, True, 1, 55.08),
    ("qwen2.5-7b", 16, 2, False, 2, 80.51),
    ("qwen2.5-7b", 16, 2, True, 1, 58.66),
]


@pytest.mark.parametrize(("name", "lora_r", "weight_bytes", "sdpo", "rows_at_once", "measured_gib"), H200_PEAKS)
def test_the_gpu_plan_holds_the_peaks_an_h200_measured(name, lora_r, weight_bytes, sdpo, rows_at_once, measured_gib):
    run = RunShape(
        rows=8,
        rows_at_once=rows_at_once,
        tokens_per_row=5120,
        turn_tokens=96,
        distilled_tokens=3744,
        lora_r=lora_r,
        weight_bytes=weight_bytes,
        sdpo_teacher="live" if sdpo else None,
    )
    planned_gib = plan_memory(shape_of(name), run, 80).total_bytes / GIB
    assert 0.95 * measured_gib <= planned_gib <= 1.1 * measured_gib


def test_a_cpu_step_of_one_forward_holds_its_gradients_only_where_the_update_outgrows_the_backward():
    shape = shape_of("smollm2")
    one_forward = plan_memory(shape, RunShape(rows=2, tokens_per_row=1024, activation_bytes=4, on_gpu=False), 24)
    assert one_forward.parts["gradients"] == 0  # 2 x 0.5 GiB beside activations and head tiles of 6 GiB
    micro_batched = RunShape(rows=2, rows_at_once=1, tokens_per_row=1024, activation_bytes=4, on_gpu=False)
    assert plan_memory(shape, micro_batched, 24).parts["gradients"] == pytest.approx(4 * shape.parameters)
    few_tokens = plan_memory(shape_of("qwen2.5-1.5b"), RunShape(rows=2, tokens_per_row=64, on_gpu=False), 24)
    assert few_tokens.parts["gradients"] > 0.9 * 4 * shape_of("qwen2.5-1.5b").parameters


def test_the_plans_modelled_bytes_leave_out_only_the_fixed_allowance_for_the_process():
    for on_gpu in (True, False):
        plan = plan_memory(shape_of("smollm2"), RunShape(**STEP, on_gpu=on_gpu), 24)
        assert plan.total_bytes - plan.modelled_bytes == pytest.approx(1.5 * GIB)


@pytest.mark.parametrize("text", ["3x2", "2x0", "2by8", "x8", "2x"])
def test_a_memory_bench_shape_is_an_even_number_of_rows_by_some_turns(text):
    from regrow.bench.memory import parsed_shape

    assert parsed_shape("4X12") == (4, 12)
    with pytest.raises(ValueError, match="ROWSxTURNS"):
        parsed_shape(text)


def _balanced_policy(folder, tokenizer):
    """A random 4-layer Qwen2 whose weights with AdamW, activations and LM head tiles are each a sixth or more of a
    2-row step's peak, small enough for a CI step of a few seconds."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=8192,  # more rows than the test tokenizer's 600: a head of a real model's weight
        hidden_size=384,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.train
def test_the_cpu_plan_is_within_15_percent_of_the_peak_a_real_training_step_reaches(tmp_path, tokenizer):
    from regrow.bench.memory import run_memory_bench
    from regrow.bench.options import MemoryBenchOptions

    folder = _balanced_policy(tmp_path / "policy", tokenizer)
    result = run_memory_bench(MemoryBenchOptions(model=str(folder), shape=["2x2"]))
    step = result["shapes"][0]
    # the plan is what a CPU run is refused by: over the peak, a run that fits is refused; under it, killed
    assert 0.85 <= step["planned_over_measured"] <= 1.15, step
    assert step["backward_peak_gib"] > step["optimizer_peak_gib"]  # the head's backward, every activation held
