"""What the episode API answers when a request cannot be served; each transport maps `code` and `http_status`."""

from proto.health import ENGINE_UNREACHABLE


class EpisodeError(Exception):
    """A request about episodes that cannot be served; `code` and `http_status` say how to report it."""

    code = "EXECUTION_ERROR"
    http_status = 409

    def __init__(self, message: str):
        super().__init__(f"{self.code}: {message}")


class CapacityReached(EpisodeError):
    code, http_status = "CAPACITY_REACHED", 503


class TaskNotFound(EpisodeError):
    code, http_status = "UNKNOWN_TASK", 404


class EpisodeNotFound(EpisodeError):
    code, http_status = "UNKNOWN_EPISODE", 404


class NoEpisode(EpisodeError):
    code = "NO_EPISODE"


class EpisodeOver(EpisodeError):
    code = "EPISODE_OVER"


class EngineUnreachable(EpisodeError):
    code, http_status = ENGINE_UNREACHABLE, 503


class UnknownOrigin(EpisodeError):
    code, http_status = "UNKNOWN_ORIGIN", 400


class BadResetOption(EpisodeError):
    code, http_status = "BAD_RESET_OPTION", 400
