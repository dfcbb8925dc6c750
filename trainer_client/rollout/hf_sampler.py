"""Turn sampling with a transformers model, batching the turns that concurrent rollout workers ask for.

Tokens are drawn from the temperature-scaled distribution (no top-k or top-p) and their logprobs
recorded: the same quantity GRPOTrainer computes for the policy.
"""

import asyncio
import logging
import threading
from dataclasses import dataclass

import torch

from trainer_client.rollout.agent_loop import GeneratedTurn

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
    ):
        self.model = model
        # Held over each forward: a teacher that swaps the model's adapter holds it too, so no turn is sampled from it.
        self.weights_lock = weights_lock or threading.Lock()
        self.pad_token_id = pad_token_id
        self.stop_ids = list(stop_ids)
        self.temperature = temperature
        self.max_batch = max_batch
        self.version = 0
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
        """Sample one turn for each context (left-padded into one batch), token by token with a KV cache."""
        device = next(self.model.parameters()).device
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, context in enumerate(contexts):
            input_ids[row, width - len(context) :] = torch.tensor(context)
            attention_mask[row, width - len(context) :] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        stops = torch.tensor(self.stop_ids, device=device)
        limits = torch.tensor(max_new_tokens, device=device)
        finished = torch.zeros(len(contexts), dtype=torch.bool, device=device)
        tokens, logprobs = [], []
        with self.weights_lock:
            output = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                logits_to_keep=1,
            )
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
        new_tokens = torch.stack(tokens, dim=1).cpu()
        new_logprobs = torch.stack(logprobs, dim=1).cpu()
        turns = []
        for row, limit in enumerate(max_new_tokens):
            ids = new_tokens[row, :limit].tolist()
            stop = next((i for i, t in enumerate(ids) if t in self.stop_ids), None)
            end = len(ids) if stop is None else stop + 1
            turns.append(
                GeneratedTurn(ids=ids[:end], logprobs=new_logprobs[row, :end].tolist(), finished=stop is not None)
            )
        return turns
