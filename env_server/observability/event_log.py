"""Structured logs: one JSON line per event, always with the episode id when there is one."""

import json
import logging

log = logging.getLogger("regrow.events")
# The LogRecord attribute that carries an event's fields to the formatter as they were given.
EVENT_FIELDS = "regrow_event"


def log_event(event: str, episode_id: str | None = None, **fields: object) -> None:
    """Log `event` with its fields: a readable line for a plain handler, the fields themselves for the JSON one."""
    record = {"event": event, "episode_id": episode_id, **fields}
    said = " ".join(f"{name}={value}" for name, value in record.items() if value is not None and name != "event")
    log.info("%s %s", event, said, extra={EVENT_FIELDS: record})


class JsonLineFormatter(logging.Formatter):
    """Renders every record as one JSON object; event records keep their fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {"ts": self.formatTime(record), "level": record.levelname, "logger": record.name}
        fields = getattr(record, EVENT_FIELDS, None)
        line.update(fields if isinstance(fields, dict) else {"message": record.getMessage()})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
