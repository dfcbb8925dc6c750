"""`regrow train` reads every setting from REGROW_TRAIN_* variables, and a flag given on the command line wins."""

import pickle

import pytest
from typer.testing import CliRunner

from regrow.cli import app
from trainer_client.train.settings import TrainSettings


def test_a_flag_is_checked_against_the_settings_bounds():
    result = CliRunner().invoke(app, ["train", "--env", "http://127.0.0.1:9", "--group-size", "1", "--device", "cpu"])
    assert result.exit_code == 1 and "group_size" in result.output


def _unwrapped(output: str) -> str:
    """rich wraps at the console's width, which is 80 where no terminal is (a pytest-xdist worker)."""
    return output.replace("\n", "")


@pytest.mark.train  # the model's path is read where the policy loads, after torch
def test_variables_configure_the_run_when_no_flag_is_given(tmp_path):
    env = {"REGROW_TRAIN_ENV": "http://127.0.0.1:9", "REGROW_TRAIN_MODEL": str(tmp_path / "from-variable")}
    result = CliRunner().invoke(app, ["train", "--device", "cpu"], env=env)
    assert result.exit_code == 1
    assert "from-variable" in _unwrapped(result.output)


@pytest.mark.train  # the model's path is read where the policy loads, after torch
def test_a_flag_overrides_its_variable(tmp_path):
    env = {"REGROW_TRAIN_ENV": "http://127.0.0.1:9", "REGROW_TRAIN_MODEL": str(tmp_path / "from-variable")}
    result = CliRunner().invoke(app, ["train", "--device", "cpu", "--model", str(tmp_path / "from-flag")], env=env)
    assert result.exit_code == 1
    output = _unwrapped(result.output)
    assert "from-flag" in output and "from-variable" not in output


def test_a_missing_env_url_is_a_clear_error():
    result = CliRunner().invoke(app, ["train"], env={"REGROW_TRAIN_ENV": ""})
    assert result.exit_code == 1
    assert "env" in result.output


@pytest.mark.train
def test_every_setting_the_trainer_config_shares_reaches_it():
    from trainer_client.train.trainer_config import build_config

    changed = {
        "alpha_sdpo": 0.3,
        "sdpo_teacher": "ema",
        "sdpo_jsd_alpha": 0.2,
        "sdpo_top_k": 7,
        "sdpo_importance_clip": 3.0,
        "beta_dpo": 0.4,
        "dpo_beta": 0.2,
        "dpo_context_grad": False,
        "channel_weights": "auto",
        "learning_rate": 3e-5,
        "temperature": 0.7,
        "loss_type": "grpo",
        "save_steps": 9,
        "seed": 5,
    }
    settings = TrainSettings(env="http://127.0.0.1:9", **changed)
    config = build_config(settings, "cpu")
    translated = ("output_dir", "bf16", "device")  # a str path; bf16 and the device follow the resolved device
    shared = [name for name in TrainSettings.model_fields if hasattr(config, name) and name not in translated]
    assert set(changed) <= set(shared)
    for name in shared:
        assert getattr(config, name) == getattr(settings, name), f"{name} does not reach the trainer config"
    assert config.max_steps == settings.steps and config.num_generations == settings.group_size


@pytest.mark.train
def test_the_learning_rate_schedule_reaches_the_trainer():
    """TRL decays the rate linearly to 0 by the last step: a 6-step run trained at 58% of its rate on average."""
    from trainer_client.train.trainer_config import build_config

    assert str(build_config(TrainSettings(env="http://127.0.0.1:9"), "cpu").lr_scheduler_type.value) == "linear"
    config = build_config(TrainSettings(env="http://127.0.0.1:9", lr_schedule="constant"), "cpu")
    assert config.lr_scheduler_type.value == "constant"


@pytest.mark.train
def test_the_trl_configs_channel_fields_are_the_settings_declarations():
    import dataclasses

    from trainer_client.train.grpo_trainer import CHANNEL_SETTINGS, RegrowGRPOConfig

    fields = {field.name: field for field in dataclasses.fields(RegrowGRPOConfig)}
    for name in CHANNEL_SETTINGS:
        declared = TrainSettings.model_fields[name]
        assert (fields[name].type, fields[name].default, fields[name].metadata["help"]) == (
            declared.annotation,
            declared.default,
            declared.description,
        ), f"RegrowGRPOConfig.{name} differs from its declaration in TrainSettings"
    config = RegrowGRPOConfig(
        output_dir="unused",
        use_cpu=True,
        **TrainSettings(env="http://127.0.0.1:9", alpha_sdpo=0.25, dpo_context_grad=False).model_dump(
            include=set(CHANNEL_SETTINGS)
        ),
    )
    assert (config.alpha_sdpo, config.dpo_context_grad, config.loss_type) == (0.25, False, "dr_grpo")
    # The Trainer pickles its args into every checkpoint (training_args.bin).
    assert pickle.loads(pickle.dumps(config)).alpha_sdpo == 0.25


def test_lora_without_a_learning_rate_gets_the_lora_default_and_a_given_rate_wins(monkeypatch):
    """Before, a LoRA arm trained at the full fine-tune's 1e-6: its adapter barely moved and a ladder read no effect."""
    from trainer_client.train.settings import FULL_LEARNING_RATE, LORA_LEARNING_RATE

    assert TrainSettings(env="http://127.0.0.1:9").learning_rate == FULL_LEARNING_RATE
    lora = TrainSettings(env="http://127.0.0.1:9", lora_r=16)
    assert lora.learning_rate == LORA_LEARNING_RATE == pytest.approx(10 * FULL_LEARNING_RATE)
    assert lora.lora_rate_by_default
    given = TrainSettings(env="http://127.0.0.1:9", lora_r=16, learning_rate=3e-6)
    assert given.learning_rate == 3e-6 and not given.lora_rate_by_default
    monkeypatch.setenv("REGROW_TRAIN_LEARNING_RATE", "2e-6")
    assert TrainSettings(env="http://127.0.0.1:9", lora_r=16).learning_rate == 2e-6


def test_weights_load_in_bf16_on_a_gpu_and_fp32_on_a_cpu_unless_asked_or_the_dpo_pairs_say_otherwise():
    from trainer_client.train.memory_plan import run_shape

    settings = TrainSettings(env="http://127.0.0.1:9")
    assert (settings.weights_dtype_on("cuda"), settings.weights_dtype_on("cpu")) == ("bfloat16", "float32")
    assert settings.weights_dtype_on("cuda", pairs_dtype="float32") == "float32"  # the reference's own dtype
    asked = TrainSettings(env="http://127.0.0.1:9", weights_dtype="float32")
    assert asked.weights_dtype_on("cuda", pairs_dtype="bfloat16") == "float32"  # then the pairs check refuses
    assert run_shape(settings, 1, "none", "cuda").weight_bytes == 2
    assert run_shape(settings, 1, "none", "cpu").weight_bytes == 4


def test_weights_that_fsdp_trains_in_bf16_load_as_the_float32_masters_accelerate_makes_of_them():
    """Before, they loaded in bf16 on every rank, and accelerate's FSDP2 prepare upcast each rank's copy to float32,
    a second copy in host RAM, while the plan counted 2 bytes a weight."""
    from trainer_client.train.memory_plan import run_shape

    settings = TrainSettings(env="http://127.0.0.1:9")
    assert settings.weights_dtype_on("cuda", sharding="fsdp") == "float32"
    assert run_shape(settings, 8, "fsdp", "cuda").weight_bytes == 4
    lora = TrainSettings(env="http://127.0.0.1:9", lora_r=16)  # a frozen base is not upcast
    assert lora.weights_dtype_on("cuda", sharding="fsdp") == "bfloat16"


@pytest.mark.train
def test_each_rank_takes_its_own_device_from_the_launcher(monkeypatch):
    """Before, every rank loaded its copy of the policy onto GPU 0: 8 copies on one card under `accelerate launch`."""
    import torch

    from trainer_client.train.placement import rank_device

    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        return  # the CUDA half runs where a GPU is: a GPU box, or the device check
    monkeypatch.setenv("LOCAL_RANK", str(torch.cuda.device_count()))
    with pytest.raises(RuntimeError, match="CUDA device"):
        rank_device("cuda")
    last = torch.cuda.device_count() - 1
    monkeypatch.setenv("LOCAL_RANK", str(last))
    assert rank_device("cuda") == f"cuda:{last}" and torch.cuda.current_device() == last


def test_a_sharded_run_refuses_what_would_hang_or_read_shards_as_whole_weights():
    """Before, FSDP and ZeRO-3 runs started with the in-process sampler and the EMA teacher, each of which hangs or
    corrupts a sharded run. SDPO and DPO run under FSDP (their forwards are made even over the ranks), not ZeRO-3."""
    from trainer_client.train.placement import check_sharding

    url = "http://127.0.0.1:9"
    check_sharding(TrainSettings(env=url, alpha_sdpo=1.0, sdpo_teacher="ema"), "none")  # DDP or one process: all fine
    with pytest.raises(ValueError, match="--vllm-server") as refused:
        check_sharding(TrainSettings(env=url, alpha_sdpo=1.0, sdpo_teacher="ema"), "fsdp")
    assert "--sdpo-teacher live" in str(refused.value)
    served = dict(env=url, vllm_server="http://gpu:8000", device="cuda")
    with pytest.raises(ValueError, match="fsdp.yaml"):
        check_sharding(TrainSettings.model_construct(**served, alpha_sdpo=0.0, beta_dpo=0.5), "zero3")
    for channels in (dict(alpha_sdpo=0.0, beta_dpo=0.0), dict(alpha_sdpo=1.0, sdpo_teacher="live", beta_dpo=0.5)):
        check_sharding(TrainSettings.model_construct(**served, **channels, lora_r=0), "fsdp")


@pytest.mark.train
def test_micro_batch_rows_become_trls_per_device_batch_and_accumulation():
    from trainer_client.train.trainer_config import build_config

    url = "http://127.0.0.1:9"
    config = build_config(TrainSettings(env=url, group_size=4, groups_per_step=2, micro_batch_rows=2), "cpu")
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == (2, 4)
    assert config.steps_per_generation == 4  # the generation batch is the whole step: its groups stay whole
    whole = build_config(TrainSettings(env=url, group_size=4, groups_per_step=2), "cpu")
    assert (whole.per_device_train_batch_size, whole.gradient_accumulation_steps) == (8, 1)
    with pytest.raises(ValueError, match="give a divisor of 8"):
        build_config(TrainSettings(env=url, group_size=4, groups_per_step=2, micro_batch_rows=3), "cpu")
    with pytest.raises(ValueError, match="at least 4"):
        build_config(TrainSettings(env=url, group_size=4, micro_batch_rows=2, beta_dpo=1, dpo_pairs_per_step=2), "cpu")
