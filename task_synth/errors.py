"""The one error a synthesis run raises for bad input; its message says what to do."""


class SynthError(RuntimeError):
    """Bad input or an unusable repository: a one-line message with the remedy."""
