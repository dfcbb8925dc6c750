"""Turn sampling with a transformers model, batching the turns that concurrent rollout workers ask for.

Tokens are drawn from the temperature-scaled distribution (no top-k or top-p) and their logprobs
recorded: the same quantity GRPOTrainer computes for the policy.
"""

import asyncio
import logging
import threading
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicLayer

from trainer_client.rollout.agent_loop import GeneratedTurn
from trainer_client.rollout.turn_cache import TurnCache, prefill_inputs, row_keys_and_values

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    context_ids: list[int]
    max_new_tokens: int
    future: asyncio.Future


class HFTurnSampler:
    """Generates turns with a live transformers model; requests queued together are generated as one batch."""

    def __init__(
        self,
        model,
        pad_token_id: int,
        stop_ids: list[int],
        temperature: float = 1.0,
        max_batch: int = 16,
        weights_lock: "threading.Lock | None" = None,
        cached_turns: int | None = None,
    ):
        self.model = model
        # Held over each forward: a teacher that swaps the model's adapter holds it too, so no turn is sampled from it.
        self.weights_lock = weights_lock or threading.Lock()
        self.pad_token_id = pad_token_id
        self.stop_ids = list(stop_ids)
        self.temperature = temperature
        self.max_batch = max_batch
        self.version = 0
        # each in-flight episode's latest turn, twice over: a group's episodes and the next group's share prompts
        self.turn_cache = TurnCache(2 * max_batch if cached_turns is None else cached_turns)
        self.reused_tokens = 0  # context tokens taken from the cache, not run again
        self.prefilled_tokens = 0  # context tokens run in a turn's first forward
        self._queue: asyncio.Queue[_Request] | None = None
        self._server: asyncio.Task | None = None

    async def generate(self, context_ids: list[int], max_new_tokens: int) -> GeneratedTurn:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._server = asyncio.get_running_loop().create_task(self._serve())
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Request(list(context_ids), max_new_tokens, future))
        return await future

    async def _serve(self) -> None:
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < self.max_batch:
                batch.append(self._queue.get_nowait())
            try:
                turns = await asyncio.to_thread(
                    self.generate_batch, [r.context_ids for r in batch], [r.max_new_tokens for r in batch]
                )
            except Exception as error:  # hand the failure to every waiting worker
                for request in batch:
                    request.future.set_exception(error)
                continue
            for request, turn in zip(batch, turns):
                request.future.set_result(turn)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.cancel()
            self._server, self._queue = None, None

    @torch.no_grad()
    def generate_batch(self, contexts: list[list[int]], max_new_tokens: list[int]) -> list[GeneratedTurn]:
        """Sample one turn for each context, token by token with a KV cache; each row prefills only the tokens
        past the longest start it shares with a cached turn (left-padded into one batch)."""
        device = next(self.model.parameters()).device
        version = self.version  # read once: the trainer may move it while this batch runs
        cached = [self.turn_cache.longest_prefix(context, version) for context in contexts]
        inputs = prefill_inputs(contexts, cached, self.pad_token_id)
        self.reused_tokens += sum(inputs.reused)
        self.prefilled_tokens += sum(len(c) for c in contexts) - sum(inputs.reused)
        attention_mask, position_ids = inputs.attention_mask.to(device), inputs.position_ids.to(device)
        stops = torch.tensor(self.stop_ids, device=device)
        limits = torch.tensor(max_new_tokens, device=device)
        finished = torch.zeros(len(contexts), dtype=torch.bool, device=device)
        tokens, logprobs = [], []
        with self.weights_lock:
            output = self.model(
                input_ids=inputs.input_ids.to(device),
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=inputs.past,
                use_cache=True,
                logits_to_keep=1,
            )
        fed = 0  # sampled tokens run through the model, whose keys and values the cache holds
        for step in range(max(max_new_tokens)):
            step_logprobs = torch.log_softmax(output.logits[:, -1].float() / self.temperature, dim=-1)
            token = torch.multinomial(step_logprobs.exp(), 1).squeeze(-1)
            token = torch.where(finished, torch.full_like(token, self.pad_token_id), token)
            tokens.append(token)
            logprobs.append(step_logprobs.gather(-1, token.unsqueeze(-1)).squeeze(-1))
            finished |= torch.isin(token, stops) | (limits <= step + 1)
            if bool(finished.all()):
                break
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
            position_ids = position_ids[:, -1:] + 1
            if output.past_key_values is None:
                raise RuntimeError(
                    "the policy returned no KV cache; turn gradient checkpointing off for streamed rollouts"
                )
            with self.weights_lock:
                output = self.model(
                    input_ids=token.unsqueeze(-1),
                    attention_mask=attention_mask,
                    position_ids=position_ids,
                    past_key_values=output.past_key_values,
                    use_cache=True,
                )
            fed += 1
        turns = self._turns(torch.stack(tokens, dim=1).cpu(), torch.stack(logprobs, dim=1).cpu(), max_new_tokens)
        self._remember(contexts, turns, output.past_key_values, attention_mask, fed, version)
        return turns

    def _turns(self, new_tokens: torch.Tensor, new_logprobs: torch.Tensor, limits: list[int]) -> list[GeneratedTurn]:
        turns = []
        for row, limit in enumerate(limits):
            ids = new_tokens[row, :limit].tolist()
            stop = next((i for i, t in enumerate(ids) if t in self.stop_ids), None)
            end = len(ids) if stop is None else stop + 1
            turns.append(
                GeneratedTurn(ids=ids[:end], logprobs=new_logprobs[row, :end].tolist(), finished=stop is not None)
            )
        return turns

    def _remember(self, contexts, turns, cache, attention_mask, fed: int, version: int) -> None:
        """Cache each row's context and the part of its turn that ran, for the episode's next turn to continue."""
        if not self.turn_cache.capacity or cache is None:
            return
        if any(type(layer) is not DynamicLayer for layer in cache.layers):
            return  # a sliding-window or quantized layer does not hold every column the rows ran
        for row, (context, turn) in enumerate(zip(contexts, turns)):
            ran = turn.ids[: min(len(turn.ids), fed)]
            layers = row_keys_and_values(cache, attention_mask, row, len(context) + len(ran))
            self.turn_cache.store(tuple(context + ran), layers, version)
