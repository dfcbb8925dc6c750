"""The training step and run: settings, policy loading and forwards, the prefix cache, the GRPO trainer."""
