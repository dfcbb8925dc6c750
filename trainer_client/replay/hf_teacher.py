"""A teacher that is a local transformers chat model, decoded greedily in a worker thread."""

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, cast

from trainer_client.replay.teacher_call import TeacherError, TeacherReply, call_cost_usd
from trainer_client.replay.teachers_config import HFTeacherConfig

if TYPE_CHECKING:
    from transformers import BatchEncoding

log = logging.getLogger(__name__)


class HFTeacher:
    """Loads a model folder once; answers one chat at a time (a second call waits for the first)."""

    def __init__(self, config: HFTeacherConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not config.path.is_dir():
            raise ValueError(f"teacher {config.name!r}: model folder {config.path} does not exist")
        self.name = config.name
        self.config = config
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(config.path)
        if self._tokenizer.chat_template is None:
            raise ValueError(f"teacher {config.name!r}: {config.path} has no chat template; use a chat model")
        # transformers wraps `to` in functools.wraps, whose stub does not bind self (typeshed#10653)
        self._model = AutoModelForCausalLM.from_pretrained(config.path).to(config.device).eval()  # type: ignore[arg-type]
        self._lock = asyncio.Lock()

    async def complete(self, messages: list[dict[str, Any]]) -> TeacherReply:
        """The model's greedy reply; stops at `timeout_s` and then fails as a timeout."""
        async with self._lock:
            return await asyncio.to_thread(self._generate, messages)

    def _generate(self, messages: list[dict[str, Any]]) -> TeacherReply:
        started = time.monotonic()
        # with return_dict=True it is a BatchEncoding; transformers annotates every form it can return
        encoded = cast(
            "BatchEncoding",
            self._tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            ),
        )
        prompt = encoded.to(self.config.device)
        with self._torch.no_grad():
            output = self._model.generate(
                **prompt,
                do_sample=False,
                max_new_tokens=self.config.max_tokens,
                max_time=self.config.timeout_s,
                pad_token_id=self._tokenizer.pad_token_id or self._tokenizer.eos_token_id,
            )
        elapsed = time.monotonic() - started
        new_ids = output[0, prompt["input_ids"].shape[1] :].tolist()
        finished = bool(new_ids) and new_ids[-1] == self._tokenizer.eos_token_id
        if not finished and elapsed >= self.config.timeout_s:
            raise TeacherError("timeout", f"teacher {self.name!r}: no complete answer within {self.config.timeout_s}s")
        input_tokens = prompt["input_ids"].shape[1]
        # tool-call markers may be special tokens, so only the end-of-turn token is dropped
        text = self._tokenizer.decode(new_ids[:-1] if finished else new_ids)
        return TeacherReply(
            text=cast(str, text),  # one row of ids decodes to one str; transformers annotates str | list[str]
            input_tokens=input_tokens,
            output_tokens=len(new_ids),
            cost_usd=call_cost_usd(self.config, input_tokens, len(new_ids)),
            latency_s=elapsed,
            attempts=1,
        )

    async def aclose(self) -> None:
        return None
