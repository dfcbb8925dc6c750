"""A teacher behind an OpenAI-compatible /chat/completions endpoint; the openai SDK times out, retries and backs off."""

import json
import logging
import os
import time
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageParam

from trainer_client.replay.teacher_call import TeacherError, TeacherReply, call_cost_usd, worst_case_tokens
from trainer_client.replay.teachers_config import OpenAITeacherConfig

log = logging.getLogger(__name__)

# The SDK refuses to start without a key; a keyless local server ignores this one.
_KEYLESS = "no-key"


class OpenAITeacher:
    """Asks one chat-completions model for the next assistant turn."""

    def __init__(self, config: OpenAITeacherConfig) -> None:
        self.name = config.name
        self.config = config
        key = None
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise ValueError(
                    f"teacher {config.name!r}: environment variable {config.api_key_env} is empty; "
                    "export the API key there or drop api_key_env for a keyless local server"
                )
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url,
            api_key=key or _KEYLESS,  # never None, which would send OPENAI_API_KEY to whatever server this is
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    async def complete(self, messages: list[dict[str, Any]]) -> TeacherReply:
        """The model's reply; the SDK retries timeouts, connection faults, 408, 409, 429 and 5xx with backoff."""
        started = time.monotonic()
        try:
            response = await self._client.chat.completions.with_raw_response.create(
                model=self.config.model,
                messages=cast(list[ChatCompletionMessageParam], messages),  # our turns are the API's message dicts
                max_tokens=self.config.max_tokens,
                temperature=self.config.temperature,
            )
            completion = response.parse()
        except openai.APITimeoutError as error:
            raise TeacherError(
                "timeout", f"teacher {self.name!r}: no answer within {self.config.timeout_s}s"
            ) from error
        except openai.APIConnectionError as error:
            raise TeacherError(
                "connection", f"teacher {self.name!r}: {self.config.base_url} unreachable: {error.__cause__ or error}"
            ) from error
        except openai.APIStatusError as error:
            raise TeacherError(
                f"http_{error.status_code}",
                f"teacher {self.name!r}: HTTP {error.status_code}: {error.response.text[:300]}",
            ) from error
        except ValueError as error:
            raise TeacherError("bad_response", f"teacher {self.name!r}: not a chat completion: {error}") from error
        return self._reply(completion, messages, started, response.retries_taken + 1)

    def _reply(
        self, completion: ChatCompletion, messages: list[dict[str, Any]], started: float, attempts: int
    ) -> TeacherReply:
        try:
            # the SDK builds replies without validating them, so a malformed one fails here
            text = _message_text(completion.choices[0].message)
            usage = completion.usage
        except (AttributeError, IndexError, TypeError) as error:
            raise TeacherError("bad_response", f"teacher {self.name!r}: not a chat completion: {error}") from error
        if usage is not None and (usage.prompt_tokens is not None or usage.completion_tokens is not None):
            input_tokens = int(usage.prompt_tokens or 0)
            output_tokens = int(usage.completion_tokens or 0)
        else:
            # priced at the reserved worst case, so that a server without usage figures cannot carry the run past its
            # cap
            input_tokens, output_tokens = worst_case_tokens(self.config, messages)
            log.warning("teacher %s returned no usage; its call is costed at its worst case", self.name)
        return TeacherReply(
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=call_cost_usd(self.config, input_tokens, output_tokens),
            latency_s=time.monotonic() - started,
            attempts=attempts,
        )

    async def aclose(self) -> None:
        await self._client.close()


def _message_text(message: ChatCompletionMessage) -> str:
    """The reply as assistant text; native tool_calls are written in our <tool_call> form for one parser."""
    text = message.content or ""
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)  # custom (free-text) tool calls have none
        name = getattr(function, "name", None) or ""
        arguments: Any = getattr(function, "arguments", None) or "{}"
        if not isinstance(arguments, str):  # some servers send the arguments as an object
            arguments = json.dumps(arguments)
        text += f'\n<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {arguments}}}\n</tool_call>'
    return text
