"""Structured logs: one JSON line per event, always with the episode id when there is one."""

import json
import logging

log = logging.getLogger("regrow.events")


def log_event(event: str, episode_id: str | None = None, **fields: object) -> None:
    log.info(json.dumps({"event": event, "episode_id": episode_id, **fields}, default=str))


class JsonLineFormatter(logging.Formatter):
    """Renders every record as one JSON object; event records keep their fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": self.formatTime(record), "level": record.levelname, "logger": record.name}
        message = record.getMessage()
        try:
            parsed = json.loads(message) if record.name == log.name else None
        except ValueError:
            parsed = None
        line.update(parsed if isinstance(parsed, dict) else {"message": message})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
