"""`python -m regrow`: the CLI, for an interpreter whose venv has no `regrow` script (the trainer's)."""

from regrow.cli import app

app()
