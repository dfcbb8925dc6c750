"""`regrow train --vllm-server`: turns generated on a vLLM server, weights pushed to it by GRPOTrainer.

On CPU the turns go through TRL's real VLLMClient to a stand-in that speaks vLLM's completions wire
format (token-id prompts, stop_token_ids, ignore_eos, `token_id:` logprobs) and samples with the real
tiny policy. The `gpu` tests run `trl vllm-serve` itself and skip without CUDA and vllm.
"""

import asyncio
import importlib.util
import os
import socket
import sys
from pathlib import Path

import pytest

from tests.live_process import free_port, served_in_thread, served_subprocess
from tests.trainer_client.tiny_policy import tiny_qwen2
from trainer_client.rollout.vllm_sampler import VLLMTurnSampler, parsed_turn
from trainer_client.rollout.vllm_server import VLLMServerError, check_vllm_ready

pytestmark = pytest.mark.train

MAX_MODEL_LEN = 1024


class StandInVLLM:
    """vLLM's /health, /v1/models and /v1/completions, answered as vLLM answers, sampled by a real policy."""

    def __init__(self, model, tokenizer):
        self.model = model
        self.tokenizer = tokenizer
        self.requests: list[dict] = []
        self.replies: list[dict] = []
        self.gather = 1  # hold each request until this many are in flight (or 20 s pass)
        self.in_flight = 0
        self.max_in_flight = 0

    def app(self):
        from fastapi import Body, FastAPI
        from fastapi.responses import JSONResponse

        app = FastAPI()
        company = asyncio.Condition()

        @app.get("/health")
        async def health():
            return {}

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": "tiny-policy", "object": "model"}]}

        @app.post("/v1/completions")
        async def completions(body: dict = Body(...)):
            self.requests.append(body)
            longest = max(len(prompt) for prompt in body["prompt"]) + body["max_tokens"]
            if longest > MAX_MODEL_LEN:
                message = (
                    f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you requested "
                    f"{longest} tokens."
                )
                return JSONResponse(
                    {"error": {"message": message, "type": "BadRequestError", "code": 400}}, status_code=400
                )
            async with company:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                company.notify_all()
                try:
                    await asyncio.wait_for(company.wait_for(lambda: self.max_in_flight >= self.gather), timeout=20)
                except TimeoutError:
                    pass
            try:
                turns = await asyncio.to_thread(self._sample, body)
            finally:
                self.in_flight -= 1
            reply = {
                "id": f"cmpl-{len(self.replies)}",
                "object": "text_completion",
                "model": "tiny-policy",
                "choices": [
                    self._choice(i, prompt, turn, body) for i, (prompt, turn) in enumerate(zip(body["prompt"], turns))
                ],
            }
            self.replies.append(reply)
            return reply

        return app

    def _sample(self, body: dict):
        from trainer_client.rollout.hf_sampler import HFTurnSampler

        stops = list(body.get("stop_token_ids") or []) + (
            [] if body.get("ignore_eos") else [self.tokenizer.eos_token_id]
        )
        sampler = HFTurnSampler(self.model, self.tokenizer.pad_token_id, stops, body["temperature"])
        return sampler.generate_batch(body["prompt"], [body["max_tokens"]] * len(body["prompt"]))

    def _choice(self, index: int, prompt: list[int], turn, body: dict) -> dict:
        as_ids = body.get("return_tokens_as_token_ids")
        tokens = [f"token_id:{t}" if as_ids else self.tokenizer.convert_ids_to_tokens(t) for t in turn.ids]
        logprobs = None
        if body.get("logprobs") is not None:
            logprobs = {
                "text_offset": list(range(len(tokens))),
                "token_logprobs": turn.logprobs,
                "tokens": tokens,
                "top_logprobs": [{token: lp} for token, lp in zip(tokens, turn.logprobs)],
            }
        return {
            "index": index,
            "text": self.tokenizer.decode(turn.ids),
            "logprobs": logprobs,
            "finish_reason": "stop" if turn.finished else "length",
            "stop_reason": turn.ids[-1] if turn.finished else None,
            "prompt_token_ids": prompt if body.get("return_token_ids") else None,
            "token_ids": turn.ids if body.get("return_token_ids") else None,
        }


@pytest.fixture(scope="module")
def stand_in(tokenizer):
    server = StandInVLLM(tiny_qwen2(tokenizer).eval(), tokenizer)
    with served_in_thread(server.app(), "the stand-in vLLM server") as url:
        server.url = url
        yield server


@pytest.fixture
def vllm(stand_in):
    stand_in.requests.clear()
    stand_in.replies.clear()
    stand_in.gather, stand_in.max_in_flight = 1, 0
    return stand_in


@pytest.fixture
def trl_client_without_vllm(monkeypatch):
    # VLLMClient refuses to start without vllm only for the sake of weight sync; its generation is plain HTTP.
    monkeypatch.setattr("trl.generation.vllm_client.is_vllm_available", lambda *args, **kwargs: True)


def connect(url, episode_tokens, temperature=1.0):
    return VLLMTurnSampler.connect(url, episode_tokens.stop_ids, temperature, max_concurrency=4)


def policy_logprobs(model, context: list[int], ids: list[int], temperature: float) -> list[float]:
    """The policy's own logprobs of `ids` after `context`, at the sampling temperature."""
    import torch

    with torch.no_grad():
        device = next(model.parameters()).device
        logits = model(torch.tensor([context + ids], device=device)).logits[0, len(context) - 1 : -1].float()
        logps = torch.log_softmax(logits / temperature, dim=-1)
        return logps.gather(-1, torch.tensor(ids, device=device).unsqueeze(-1)).squeeze(-1).tolist()


def chat_context(episode_tokens, text="Implement clamp in calc/ops.py."):
    from proto import tool_specs
    from proto.transcript import initial_messages

    return episode_tokens.prompt_ids(initial_messages(text, tool_specs()))


# --- settings --------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["grpc://localhost:8000", "localhost:8000", "http://localhost:8000/v1"])
def test_settings_take_only_a_vllm_base_url(url):
    from pydantic import ValidationError

    from trainer_client.train.settings import TrainSettings

    with pytest.raises(ValidationError, match="give the server's base URL"):
        TrainSettings(env="http://env:8001", vllm_server=url)
    assert TrainSettings(env="http://env:8001", vllm_server="http://gpu-box:8000/").vllm_server == "http://gpu-box:8000"


def test_settings_refuse_vllm_generation_on_a_cpu_device():
    from pydantic import ValidationError

    from trainer_client.train.settings import TrainSettings

    with pytest.raises(ValidationError, match="needs a CUDA device"):
        TrainSettings(env="http://env:8001", vllm_server="http://localhost:8000", device="cpu")
    assert TrainSettings(env="http://env:8001").vllm_server is None  # off unless asked for


def test_vllm_switch_changes_only_the_trainers_vllm_fields(tmp_path):
    from trainer_client.train.settings import TrainSettings
    from trainer_client.train.trainer_config import build_config

    off = TrainSettings(env="http://env:8001", output_dir=tmp_path, logger="none")
    on = off.model_copy(update={"vllm_server": "http://gpu-box:8000", "vllm_timeout_s": 7.0})

    hf, served = build_config(off, "cpu").to_dict(), build_config(on, "cpu").to_dict()

    assert hf["use_vllm"] is False
    assert {key for key in hf if hf[key] != served[key]} == {
        "use_vllm",
        "vllm_mode",
        "vllm_server_base_url",
        "vllm_server_timeout",
        "vllm_importance_sampling_mode",
    }
    assert (served["vllm_mode"], served["vllm_server_base_url"], served["vllm_server_timeout"]) == (
        "server",
        "http://gpu-box:8000",
        7.0,
    )


# --- failing fast -------------------------------------------------------------------------------------


def test_no_server_at_the_url_fails_at_once_with_what_to_do():
    url = f"http://127.0.0.1:{free_port()}"

    with pytest.raises(VLLMServerError) as error:
        check_vllm_ready(url, "cuda", timeout_s=5)

    assert (
        url in str(error.value)
        and "trl vllm-serve --model" in str(error.value)
        and "drop --vllm-server" in str(error.value)
    )


def test_a_server_that_never_answers_fails_after_the_timeout_instead_of_hanging():
    with socket.socket() as silent:  # accepts connections (the kernel does), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"

        with pytest.raises(VLLMServerError, match=r"within 0\.5 s"):
            check_vllm_ready(url, "cuda", timeout_s=0.5)


def test_a_server_that_is_not_vllm_is_named_as_such(scripted_env_url):
    with pytest.raises(VLLMServerError, match=r"not a ready vLLM server \(GET /v1/models answered 404\)"):
        check_vllm_ready(scripted_env_url, "cuda", timeout_s=5)


def test_a_reachable_server_still_needs_cuda_in_the_trainer(vllm):
    with pytest.raises(VLLMServerError, match="needs a CUDA device in the trainer"):
        check_vllm_ready(vllm.url, "cpu", timeout_s=5)


def test_a_reachable_server_on_cuda_needs_vllm_installed_here(vllm):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(VLLMServerError, match="pip install vllm"):
        check_vllm_ready(vllm.url, "cuda", timeout_s=5)


def test_training_checks_the_server_before_loading_the_policy(tmp_path):
    from trainer_client.train.run import run_training
    from trainer_client.train.settings import TrainSettings

    settings = TrainSettings(
        env="http://127.0.0.1:9",
        model=str(tmp_path / "no-such-policy"),
        output_dir=tmp_path,
        device="auto",
        vllm_server=f"http://127.0.0.1:{free_port()}",
        vllm_timeout_s=2,
    )
    with pytest.raises(VLLMServerError, match="no vLLM server answers"):  # not FileNotFoundError from the model load
        run_training(settings)


def test_train_command_prints_the_remedy_and_exits_1(tmp_path):
    from typer.testing import CliRunner

    from regrow.cli import app

    port = free_port()
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--env",
            "http://127.0.0.1:9",
            "--model",
            str(tmp_path),
            "--output-dir",
            str(tmp_path),
            "--vllm-server",
            f"http://127.0.0.1:{port}",
            "--vllm-timeout",
            "2",
        ],
    )

    said = " ".join(result.output.split())
    assert result.exit_code == 1
    assert f"no vLLM server answers at http://127.0.0.1:{port}" in said and "trl vllm-serve" in said


# --- turns through TRL's VLLMClient -------------------------------------------------------------------


async def test_turn_request_carries_the_token_context_temperature_limit_and_stop_ids(
    vllm, episode_tokens, trl_client_without_vllm
):
    sampler = connect(vllm.url, episode_tokens, temperature=0.7)
    context = chat_context(episode_tokens)

    await sampler.generate(context, 9)
    await sampler.aclose()

    request = vllm.requests[-1]
    assert request["prompt"] == [context]
    assert (request["temperature"], request["max_tokens"], request["n"]) == (0.7, 9, 1)
    assert request["stop_token_ids"] == episode_tokens.stop_ids and request["ignore_eos"] is True
    assert request["logprobs"] == 0 and request["return_token_ids"] and request["return_tokens_as_token_ids"]
    assert (request["top_p"], request["top_k"], request["min_p"], request["repetition_penalty"]) == (1.0, 0, 0.0, 1.0)


async def test_turn_is_the_servers_sampled_tokens_with_their_logprobs(
    vllm, tokenizer, episode_tokens, trl_client_without_vllm
):
    sampler = connect(vllm.url, episode_tokens, temperature=0.7)
    context = chat_context(episode_tokens)

    turns = [await sampler.generate(context, 12) for _ in range(4)]
    await sampler.aclose()

    for turn, reply in zip(turns, vllm.replies):
        served = reply["choices"][0]
        assert turn.ids == served["token_ids"] and turn.logprobs == served["logprobs"]["token_logprobs"]
        assert turn.finished == (served["finish_reason"] == "stop") == (turn.ids[-1] in episode_tokens.stop_ids)
        assert 1 <= len(turn.ids) <= 12
        # the recorded logprobs are the policy's temperature-scaled logprobs of exactly these tokens
        assert turn.logprobs == pytest.approx(policy_logprobs(vllm.model, context, turn.ids, 0.7), abs=1e-4)


async def test_concurrent_workers_turns_are_in_flight_together(vllm, episode_tokens, trl_client_without_vllm):
    sampler = connect(vllm.url, episode_tokens)
    vllm.gather = 3
    contexts = [chat_context(episode_tokens, f"Task {n}: implement clamp.") for n in range(3)]

    turns = await asyncio.gather(*(sampler.generate(context, 6) for context in contexts))
    await sampler.aclose()

    assert vllm.max_in_flight == 3  # a sampler that queued the turns one by one would have 1 in flight
    assert sorted(r["prompt"][0] for r in vllm.requests) == sorted(contexts)
    assert all(1 <= len(turn.ids) <= 6 for turn in turns)


async def test_agent_loop_records_the_servers_tokens_and_logprobs(
    vllm, scripted_env_url, episode_tokens, trl_client_without_vllm
):
    from trainer_client.env.client import EnvClient
    from trainer_client.rollout.agent_loop import EpisodeLimits, play_episode

    sampler = connect(vllm.url, episode_tokens)
    env = EnvClient(scripted_env_url, max_connections=1)
    try:
        trajectory = await play_episode(
            env, sampler, episode_tokens, EpisodeLimits(max_turns=3, max_turn_tokens=16), {"task_id": "calc"}
        )
    finally:
        await env.aclose()
        await sampler.aclose()

    served = [reply["choices"][0] for reply in vllm.replies]
    assert len(trajectory.turns) == len(served) >= 1
    for turn, choice in zip(trajectory.turns, served):
        assert trajectory.completion_ids[turn.start : turn.end] == choice["token_ids"]
        assert trajectory.logprobs[turn.start : turn.end] == choice["logprobs"]["token_logprobs"]
        assert set(trajectory.env_mask[turn.start : turn.end]) == {1}
    assert (
        vllm.requests[1]["prompt"][0] == trajectory.prompt_ids + trajectory.completion_ids[: trajectory.turns[1].start]
    )


async def test_a_context_longer_than_the_server_allows_fails_with_what_to_do(
    vllm, episode_tokens, trl_client_without_vllm
):
    sampler = connect(vllm.url, episode_tokens)

    with pytest.raises(VLLMServerError, match="maximum context length is 1024.*--max_model_len"):
        await sampler.generate([5] * MAX_MODEL_LEN, 16)
    await sampler.aclose()


def test_sampled_logprob_is_found_by_token_id_among_ranked_alternatives():
    from trl.generation.vllm_client import parse_logprobs

    # logprobs=2: vLLM ranks alternatives; the sampled token (7) is not the most likely one
    choice = {
        "tokens": ["token_id:7", "token_id:3"],
        "token_logprobs": [-2.5, -0.1],
        "top_logprobs": [{"token_id:4": -0.2, "token_id:9": -1.9}, {"token_id:3": -0.1, "token_id:8": -3.0}],
    }
    logprobs, logprob_token_ids = parse_logprobs([choice])

    turn = parsed_turn(
        {"completion_ids": [[7, 3]], "logprobs": logprobs, "logprob_token_ids": logprob_token_ids}, stop_ids=[3]
    )

    assert turn.ids == [7, 3] and turn.logprobs == [-2.5, -0.1] and turn.finished


# --- the real thing (GPU) -----------------------------------------------------------------------------


def needs_cuda_and_vllm(gpus: int = 1) -> None:
    import torch

    if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
        pytest.skip("needs CUDA and vllm")
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs: NCCL weight sync cannot share one GPU between the trainer and the server")


def vllm_sized_policy(folder: Path) -> Path:
    """A random Qwen2 whose head size (64) vLLM's attention kernels take; saved with the tiny tokenizer."""
    from tests.tiny_chat_model import random_qwen2
    from tests.trainer_client.tiny_policy import train_tokenizer

    tokenizer = train_tokenizer()
    random_qwen2(
        tokenizer, hidden_size=256, intermediate_size=512, max_positions=4096, tie_embeddings=False
    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def trl_vllm_serve(model_dir: Path, log_path: Path, gpu: int):
    """`trl vllm-serve` on one GPU, as a GPU user runs it; yields its base URL once /health answers."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "HF_HUB_OFFLINE": "1"}
    command = [
        str(Path(sys.executable).parent / "trl"),
        "vllm-serve",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--dtype",
        "float32",
        "--gpu_memory_utilization",
        "0.3",
        "--max_model_len",
        "4096",
        "--enforce_eager",
    ]
    return served_subprocess(command, log_path, env, timeout_s=600, grace_s=30)


@pytest.mark.gpu
async def test_gpu_turns_from_trl_vllm_serve_carry_the_policys_logprobs(tmp_path, episode_tokens):
    needs_cuda_and_vllm()
    import torch
    from transformers import AutoModelForCausalLM

    policy_dir = vllm_sized_policy(tmp_path / "policy")
    policy = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).cuda().eval()
    with trl_vllm_serve(policy_dir, tmp_path / "vllm.log", gpu=torch.cuda.device_count() - 1) as url:
        check_vllm_ready(url, "cuda", timeout_s=30)
        sampler = connect(url, episode_tokens, temperature=0.8)
        context = chat_context(episode_tokens)
        turns = await asyncio.gather(*(sampler.generate(context, 32) for _ in range(4)))
        await sampler.aclose()

    for turn in turns:
        assert 1 <= len(turn.ids) <= 32
        assert turn.finished == (turn.ids[-1] in episode_tokens.stop_ids)
        assert turn.logprobs == pytest.approx(policy_logprobs(policy, context, turn.ids, 0.8), abs=2e-2)


@pytest.mark.gpu
async def test_gpu_training_pushes_each_steps_weights_to_the_server(tmp_path, scripted_env_url, episode_tokens):
    needs_cuda_and_vllm(gpus=2)
    import torch
    from transformers import AutoModelForCausalLM

    from trainer_client.train.run import run_training
    from trainer_client.train.settings import TrainSettings

    policy_dir = vllm_sized_policy(tmp_path / "policy")
    with trl_vllm_serve(policy_dir, tmp_path / "vllm.log", gpu=torch.cuda.device_count() - 1) as url:
        settings = TrainSettings(
            env=scripted_env_url,
            model=str(policy_dir),
            output_dir=tmp_path / "run",
            task_ids=["calc"],
            steps=2,
            group_size=2,
            groups_per_step=1,
            workers=2,
            max_turns=2,
            max_turn_tokens=24,
            max_completion_tokens=512,
            learning_rate=1e-3,
            device="cuda",
            bf16=False,
            logger="none",
            save_steps=10,
            episode_timeout_s=600,
            vllm_server=url,
            vllm_timeout_s=30,
        )
        summary = await asyncio.to_thread(run_training, settings)
        sampler = connect(url, episode_tokens, temperature=1.0)
        context = chat_context(episode_tokens)
        turns = [await sampler.generate(context, 32) for _ in range(4)]
        await sampler.aclose()

    assert summary.steps == 2 and summary.episodes >= 4
    trained = AutoModelForCausalLM.from_pretrained(summary.final_model, dtype=torch.float32).cuda().eval()
    initial = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).cuda().eval()
    served = [lp for turn in turns for lp in turn.logprobs]
    under_trained = [lp for turn in turns for lp in policy_logprobs(trained, context, turn.ids, 1.0)]
    under_initial = [lp for turn in turns for lp in policy_logprobs(initial, context, turn.ids, 1.0)]
    gap = lambda other: sum(abs(a - b) for a, b in zip(served, other)) / len(served)  # noqa: E731
    assert gap(under_trained) < gap(under_initial)  # the server samples with the trained weights
