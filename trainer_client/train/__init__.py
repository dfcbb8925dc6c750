"""The training step and run: settings, the GRPO trainer and its channel gradients, progress, the ladder."""
