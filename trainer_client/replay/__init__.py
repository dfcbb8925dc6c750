"""Trace-replay DPO: ask teachers what the student should have done, and keep their consensus as pairs."""
