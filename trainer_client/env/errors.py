"""What can go wrong talking to an env server, as typed errors, and how a refusal's code is read: shared by the
WebSocket client (client.py) and the gRPC one (grpc_client.py)."""

import re

from proto import ENVIRONMENT_FAILURES, CodingObservation

CAPACITY_REACHED = "CAPACITY_REACHED"
_LEADING_CODE = re.compile(r"([A-Z][A-Z_]*[A-Z]): ")


class EnvError(Exception):
    """Something went wrong talking to the env server."""


class EnvAtCapacity(EnvError):
    """The server refused a new session or episode because all its slots are taken: try again later."""


class EnvTransportError(EnvError):
    """The connection failed, dropped or timed out; the episode on it is lost."""


class EnvUnavailable(EnvTransportError):
    """No episode could start: the server did not answer the connect or the reset."""


class EnvEpisodeLost(EnvError):
    """The env lost the episode (its sandbox or engine died): replay it, it says nothing about the policy."""


class EnvRequestError(EnvError):
    """The server answered a request with an error (bad frame, failed reset or step)."""


def refusal_code(code: str | None, message: str | None) -> str | None:
    """The finest code of a refusal: an OpenEnv transport carries only OpenEnv's codes, so the server leads the
    message of an EXECUTION_ERROR with its own (`CAPACITY_REACHED: all 4 episode slots are busy`)."""
    if code == "EXECUTION_ERROR" and message and (leading := _LEADING_CODE.match(message)):
        return leading.group(1)
    return code


def lost_episode_error(url: str, code: str, message: str | None) -> EnvEpisodeLost:
    return EnvEpisodeLost(
        f"env server at {url} lost the episode [{code}]: {message or 'no detail'}; play it again from a fresh reset"
    )


def checked_observation(observation: CodingObservation, url: str) -> CodingObservation:
    """The observation, unless it says the env lost the episode (`tool_error` in ENVIRONMENT_FAILURES)."""
    code = observation.metadata.get("tool_error")
    if code in ENVIRONMENT_FAILURES:
        raise lost_episode_error(url, code, observation.feedback)
    return observation
