"""What `regrow` logs: its own INFO lines, not one line per HTTP request a bench or a trainer sends."""

import logging

from typer.testing import CliRunner

from regrow.cli import app


def test_httpx_request_lines_are_quiet_unless_verbose():
    root, httpx_logger = logging.getLogger(), logging.getLogger("httpx")
    levels = root.level, httpx_logger.level
    root.setLevel(logging.INFO)  # as the CLI's own logging is
    httpx_logger.setLevel(logging.NOTSET)
    runner = CliRunner()
    try:
        assert runner.invoke(app, ["images", "--help"]).exit_code == 0
        assert httpx_logger.getEffectiveLevel() == logging.WARNING
        assert runner.invoke(app, ["--verbose", "images", "--help"]).exit_code == 0
        assert httpx_logger.getEffectiveLevel() == logging.DEBUG
    finally:
        root.setLevel(levels[0])
        httpx_logger.setLevel(levels[1])
