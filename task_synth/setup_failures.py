"""When the first candidates of a run all fail the same way for a reason outside them (the package does not import,
the tests time out, regrow itself errs, the solution fails in a fresh container), the rest would fail too: the run
stops with what went wrong and what to do about it. Rejections that belong to a candidate never stop a run."""

# When this many first candidates fail the same way for a reason outside them, the rest would too: stop the run.
EARLY_STOP_CANDIDATES = 3
# A candidate whose judging raised an error of regrow's own (a bug met on some odd code): that candidate is rejected,
# the run goes on, and it is judged again by a rerun (not journaled).
SYNTHESIS_ERROR = "synthesis_error"
# Per cause: what went wrong, in a line, and what to do about it.
SETUP_FAILURES = {
    "import_broken": (
        "the package fails to import the same way after every deletion",
        "Remedy: check that the package imports in the repository image (`python -c 'import <package>'`) "
        "with only the wheelhouse's dependencies installed.",
    ),
    "timeout": (
        "their tests time out",
        "Remedy: raise REGROW_SYNTH_TEST_TIMEOUT_S, or pass a --test-cmd that leaves out tests that hang in the "
        "sandbox "
        "(no network, no stdin).",
    ),
    SYNTHESIS_ERROR: (
        "regrow's synthesis raised the same unexpected error on each",
        "Remedy: this is regrow's bug, not the repository's; the log file holds the traceback of each, "
        "please report it with the repository and commit.",
    ),
    "oracle_failed": (
        "the solution fails its own tests in a fresh task container",
        "Remedy: the tests depend on something the checkout has and a clean single-commit copy does not (ignored or "
        "generated files, git history); run them in `git clone --depth 1` of the repository to see which.",
    ),
}


def setup_cause(rejection: str | None) -> str | None:
    """The setup failure a rejection is, if it is one: a rejection of the setup, which a fixed setup may pass."""
    return rejection if rejection in SETUP_FAILURES else None


def repeated_setup_failure(outcomes: list[tuple[str | None, str]], first: int = EARLY_STOP_CANDIDATES) -> str | None:
    """The error that stops the run when the first `first` candidates' (rejection, detail) show the same setup failure.

    Timeouts count whatever their detail; the other causes only with the same detail. Rejections that belong to a
    candidate (no_f2p, flaky, leak, ...) never stop a run. None: go on.
    """
    head = outcomes[:first]
    if len(head) < first:
        return None
    rejection, detail = head[0]
    cause = setup_cause(rejection)
    if cause is None or any(other != rejection for other, _ in head):
        return None
    if cause != "timeout" and any(other != detail for _, other in head):
        return None
    summary, remedy = SETUP_FAILURES[cause]
    shown = detail or "(no error output was recorded)"
    return f"synthesis stopped: the first {first} candidates all failed because {summary}:\n  {shown}\n{remedy}"
