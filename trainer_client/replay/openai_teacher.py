"""A teacher behind an OpenAI-compatible /chat/completions endpoint, with timeouts, retries and backoff."""

import asyncio
import json
import logging
import os
import time
from typing import Any

import httpx

from trainer_client.replay.teachers import TeacherError, TeacherReply, call_cost_usd, worst_case_tokens
from trainer_client.replay.teachers_config import OpenAITeacherConfig

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
_MAX_BACKOFF_S = 60.0


class OpenAITeacher:
    """Asks one chat-completions model for the next assistant turn."""

    def __init__(self, config: OpenAITeacherConfig) -> None:
        self.name = config.name
        self.config = config
        headers = {}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise ValueError(
                    f"teacher {config.name!r}: environment variable {config.api_key_env} is empty; "
                    "export the API key there or drop api_key_env for a keyless local server"
                )
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s),
        )

    async def complete(self, messages: list[dict[str, Any]]) -> TeacherReply:
        """The model's reply; retries timeouts, connection faults, 429 and 5xx with exponential backoff."""
        body = {
            "model": self.config.model,
            "messages": messages,
            "max_tokens": self.config.max_tokens,
            "temperature": self.config.temperature,
        }
        started = time.monotonic()
        last: TeacherError | None = None
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                delay = min(self.config.backoff_s * 2 ** (attempt - 1), _MAX_BACKOFF_S)
                await asyncio.sleep(max(delay, last.retry_after_s if last else 0.0))
            try:
                response = await self._client.post("chat/completions", json=body)
            except httpx.TimeoutException:
                last = TeacherError("timeout", f"teacher {self.name!r}: no answer within {self.config.timeout_s}s")
            except httpx.TransportError as error:
                last = TeacherError("connection", f"teacher {self.name!r}: {self.config.base_url} unreachable: {error}")
            else:
                if response.status_code == 200:
                    return self._reply(response, messages, started, attempt + 1)
                last = TeacherError(
                    f"http_{response.status_code}",
                    f"teacher {self.name!r}: HTTP {response.status_code}: {response.text[:300]}",
                    retry_after_s=_retry_after_s(response),
                )
                if response.status_code not in _RETRY_STATUS:
                    raise last
            log.info("teacher %s attempt %d failed: %s", self.name, attempt + 1, last)
        assert last is not None
        raise last

    def _reply(
        self, response: httpx.Response, messages: list[dict[str, Any]], started: float, attempts: int
    ) -> TeacherReply:
        try:
            payload = response.json()
            message = payload["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise TeacherError("bad_response", f"teacher {self.name!r}: not a chat completion: {error}") from error
        usage = payload.get("usage") or {}
        if usage:
            input_tokens = int(usage.get("prompt_tokens") or 0)
            output_tokens = int(usage.get("completion_tokens") or 0)
        else:
            # priced at the reserved worst case, so that a server without usage figures cannot carry the run past its
            # cap
            input_tokens, output_tokens = worst_case_tokens(self.config, messages)
            log.warning("teacher %s returned no usage; its call is costed at its worst case", self.name)
        return TeacherReply(
            text=_message_text(message),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=call_cost_usd(self.config, input_tokens, output_tokens),
            latency_s=time.monotonic() - started,
            attempts=attempts,
        )

    async def aclose(self) -> None:
        await self._client.aclose()


def _message_text(message: dict[str, Any]) -> str:
    """The reply as assistant text; native tool_calls are written in our <tool_call> form for one parser."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments") or "{}"
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        text += (
            f'\n<tool_call>\n{{"name": {json.dumps(function.get("name", ""))}, "arguments": {arguments}}}\n</tool_call>'
        )
    return text


def _retry_after_s(response: httpx.Response) -> float:
    """The server's Retry-After in seconds (numeric form only), capped."""
    try:
        return min(float(response.headers.get("retry-after", 0)), _MAX_BACKOFF_S)
    except ValueError:
        return 0.0
