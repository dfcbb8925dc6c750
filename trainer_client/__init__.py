"""The trainer: streams episodes from env servers and trains a causal LM on them (see ARCHITECTURE.md)."""

import os

# OpenMP's threads spin while they wait for work; beside an env's test runs on a small CPU box that spinning made the
# sampler 5.7x slower (SmolLM2, 2 cores: 1.4 against 8.0 tokens/s, `regrow bench sampling`). Read when torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
