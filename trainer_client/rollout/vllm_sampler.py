"""Turn sampling on a vLLM server, for `regrow train --vllm-server http://host:8100`.

Each worker's turn is one request to the server's /v1/completions with the token-id context, made
by TRL's `VLLMClient.generate` from a thread of its own: the workers' turns are in flight together
and the server's scheduler batches them. As with HFTurnSampler, only our stop ids end a turn (the
model's EOS is ignored) and the logprobs are those of the temperature-scaled distribution
(`trl vllm-serve` runs vLLM with `--logprobs-mode processed_logprobs`).

The weights reach the server through GRPOTrainer's own server mode (`server_mode_config`): before
each rollout batch it pushes the updated parameters over NCCL and resets the prefix cache.
"""

import asyncio
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainer_client.rollout.agent_loop import GeneratedTurn
from trainer_client.rollout.vllm_server import VLLMServerError

logger = logging.getLogger(__name__)


class VLLMTurnSampler:
    """Generates turns on a vLLM server; turns asked for by concurrent workers are sent concurrently."""

    def __init__(self, client: Any, stop_ids: list[int], temperature: float = 1.0, max_concurrency: int = 16):
        self.client = client  # a trl VLLMClient
        self.stop_ids = list(stop_ids)
        self.temperature = temperature
        self.max_concurrency = max_concurrency
        self.version = 0
        self._threads: ThreadPoolExecutor | None = None

    @classmethod
    def connect(cls, url: str, stop_ids: list[int], temperature: float, max_concurrency: int) -> "VLLMTurnSampler":
        """A sampler with its own TRL client; run `check_vllm_ready` first, as the client waits without a timeout."""
        from trl.generation.vllm_client import VLLMClient

        return cls(VLLMClient(base_url=url, connection_timeout=0.0), stop_ids, temperature, max_concurrency)

    async def generate(self, context_ids: list[int], max_new_tokens: int) -> GeneratedTurn:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="vllm-turn")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self.generate_turn, list(context_ids), max_new_tokens)

    def generate_turn(self, context_ids: list[int], max_new_tokens: int) -> GeneratedTurn:
        """One turn from one context, blocking: a single /v1/completions request."""
        try:
            output = self.client.generate(
                [context_ids],
                temperature=self.temperature,
                max_tokens=max_new_tokens,
                logprobs=0,  # the sampled token's logprob only
                generation_kwargs={"stop_token_ids": self.stop_ids, "ignore_eos": True},
            )
        except Exception as error:  # VLLMClient raises a bare Exception for any HTTP error
            raise VLLMServerError(
                f"the vLLM server at {self.client.base_url} failed a turn ({len(context_ids)} context tokens, "
                f"up to {max_new_tokens} new): {error}. If it names the context length, restart the server with "
                "--max_model_len of at least the prompt plus --max-completion-tokens"
            ) from error
        return parsed_turn(output, self.stop_ids)

    async def aclose(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None


def parsed_turn(output: dict[str, Any], stop_ids: list[int]) -> GeneratedTurn:
    """The turn in `VLLMClient.generate`'s output for one prompt: its ids up to the first stop id, with logprobs."""
    if output["logprobs"] is None:
        raise VLLMServerError(
            "the vLLM server returned no logprobs; it must run with --max-logprobs >= 0 (trl vllm-serve does)"
        )
    ids = list(output["completion_ids"][0])
    ranked = zip(ids, output["logprob_token_ids"][0], output["logprobs"][0], strict=True)
    logprobs = [_sampled_logprob(token, ranked_ids, ranked_logprobs) for token, ranked_ids, ranked_logprobs in ranked]
    stop = next((i for i, token in enumerate(ids) if token in stop_ids), None)
    end = len(ids) if stop is None else stop + 1
    return GeneratedTurn(ids=ids[:end], logprobs=logprobs[:end], finished=stop is not None)


def _sampled_logprob(token: int, ranked_ids: list[int], ranked_logprobs: list[float | None]) -> float:
    value = ranked_logprobs[ranked_ids.index(token)]
    return math.nan if value is None else value  # GRPOTrainer gives a NaN sampling logprob no correction
