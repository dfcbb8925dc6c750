"""Optional rewrite of a template problem statement by any OpenAI-compatible chat endpoint (off by default)."""

from __future__ import annotations

import logging
import os

from task_synth.settings import SynthSettings

log = logging.getLogger(__name__)

# The SDK refuses to start without a key; a keyless local server ignores this one.
_KEYLESS = "no-key"

INSTRUCTIONS = (
    "Rewrite this software task as a short issue report a developer would file. Keep every name, signature and "
    "test id exactly as written, add no code and no solution, and answer with the issue text only."
)


def rewrite_problem_statement(template: str, settings: SynthSettings) -> str:
    """The endpoint's rewrite of `template`, or `template` itself when rewriting is off or fails.

    The model sees only the template, which holds nothing the agent won't see, so it cannot leak the deleted code.
    """
    if not settings.rewrite_base_url or not settings.rewrite_model:
        return template
    import openai  # here, not at the top: the SDK takes half a second to import, and most runs never rewrite

    key = os.environ.get(settings.rewrite_api_key_env, "") if settings.rewrite_api_key_env else ""
    try:
        # one try, no retries: a failed rewrite only keeps the template
        with openai.OpenAI(
            base_url=settings.rewrite_base_url,
            api_key=key or _KEYLESS,
            timeout=settings.rewrite_timeout_s,
            max_retries=0,
        ) as client:
            completion = client.chat.completions.create(
                model=settings.rewrite_model,
                messages=[{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": template}],
                temperature=0,
                max_tokens=settings.rewrite_max_tokens,
            )
        # the SDK builds replies without validating them, so a malformed one fails here
        text = (completion.choices[0].message.content or "").strip()
    except (openai.OpenAIError, AttributeError, IndexError, TypeError, ValueError) as error:
        # a connection error's own text is only "Connection error."; its cause says which
        log.warning("problem statement rewrite failed (%s); keeping the template", error.__cause__ or error)
        return template
    if not text:
        log.warning("problem statement rewrite came back empty; keeping the template")
        return template
    return text + "\n"
