"""The trainer: streams episodes from env servers and trains a causal LM on them (see ARCHITECTURE.md)."""

import os

from proto.openenv_types import leave_out_openenv_web_ui

# OpenMP's threads spin while they wait for work; beside an env's test runs on a small CPU box that spinning made the
# sampler 5.7x slower (SmolLM2, 2 cores: 1.4 against 8.0 tokens/s, `regrow bench sampling`). Read when torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

leave_out_openenv_web_ui()  # before the env client imports openenv.core, which would load gradio
