"""Running recorded and perturbed calls outside any test, in one process and each under a time limit, and printing
their outcomes (none for a call that drew from `random`, whose outcome is chance): the perturbed calls that become
unseen checks, and the replay that every check must pass.

`python -m regrow_call_runner CALLS_JSON LIMIT BUDGET`, where CALLS_JSON holds a list of calls by IoCheck's field
names. With `--mutants SPEC_JSON` first, it runs the same calls against each mutant of the unit, a forked child
each. Shipped beside the recorder plugin as `regrow_call_runner`. Stdlib only: it runs in the repository's
interpreter.
"""

import contextlib
import importlib
import io
import json
import os
import random
import signal
import sys
import time

try:  # in a sandbox the replay module is copied beside this one; in regrow it is proto's
    from regrow_call_replay import replay, replay_program
    from regrow_line_reach import LineReach
    from regrow_mutant_patch import put_in_place
except ImportError:
    from proto.call_replay import replay, replay_program
    from task_synth.validation.inside.line_reach import LineReach
    from task_synth.validation.inside.mutant_patch import put_in_place

# A mutant's child may import the package afresh before its calls' budget starts: this much longer before it is killed.
IMPORT_ALLOWANCE_S = 30.0


def call_outcome(call, limit):
    """(result, raises, state, arguments after) of one call, or one program of a class, replayed; None unless it
    returned a describable value or raised an Exception, left literal arguments as they were, and its receiver and
    pickled arguments are describable after."""
    if call["steps"] is not None:
        found = replay_program(call["module"], call["qualname"], call["steps"], call["reads"], limit)
        returned, state = found.get("returned"), found.get("state")
        return None if returned is None or state is None else (returned, None, state, None)
    found = replay(call, limit)
    if (found.get("returned"), found.get("raised")) == (None, None) or found.get("changed_args"):
        return None
    if ("state" in found and found["state"] is None) or ("args_after" in found and found["args_after"] is None):
        return None
    return found.get("returned"), found.get("raised"), found.get("state"), found.get("args_after")


def import_modules(calls):
    """Import the calls' modules before any call's time starts, as the grader's check child does: a package that takes
    longer to import than a call's `limit` (inflect's 1.7 s) had every call time out, so its mutants all survived."""
    for module in sorted({call["module"] for call in calls}):
        try:
            importlib.import_module(module)
        except BaseException:  # the calls then fail to import it themselves, each under its limit, and say so
            pass


def print_call_outcomes(calls, limit, budget, tag=()):
    """Run `calls` (dicts of IoCheck's fields: module, qualname, args, kwargs, inputs, steps, reads, take, recipes,
    beside) in turn, each under `limit` seconds once their modules are imported, while `budget` seconds last; print a
    JSON line [*tag, index, result, raises, state, args after] per call with an outcome, as soon as it has one. With
    REGROW_REACH_FILES (a JSON list of paths) set, each call's lines in those files go to REGROW_REACH_OUT as a JSON
    line [index, {path: [line, ...]}]."""
    stdout = sys.stdout
    sys.stdout = io.StringIO()  # what importing prints is not an outcome either
    try:
        import_modules(calls)
    finally:
        sys.stdout = stdout
    reach_files = json.loads(os.environ.get("REGROW_REACH_FILES") or "null")
    reach_out = open(os.environ["REGROW_REACH_OUT"], "w") if reach_files else None
    deadline = time.monotonic() + budget
    for index, call in enumerate(calls):
        if time.monotonic() > deadline:
            break
        sys.stdout = io.StringIO()  # what the functions print is not the outcome
        drawn_from = random.getstate()
        reach = LineReach(reach_files) if reach_out else contextlib.nullcontext()
        try:
            with reach:
                found = call_outcome(call, limit)
        except BaseException:  # past its time, exiting, or no such function
            found = None
        finally:
            sys.stdout = stdout
        if random.getstate() != drawn_from:  # it drew random numbers: its outcome is chance, and another's draws differ
            found = None
        if found is not None:
            print(json.dumps([*tag, index, *found]), flush=True)
            if reach_out:
                reach_out.write(json.dumps([index, reach.as_json()]) + "\n")
                reach_out.flush()


def _imported_first(calls):
    """Import the calls' modules here, once, so that each mutant's child starts from them (inflect took 1.7 s to
    import in every child); a package still importing after IMPORT_ALLOWANCE_S is dropped, to be imported by each
    child as before."""

    def give_up(signum, frame):
        raise TimeoutError("the package took too long to import")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(int(IMPORT_ALLOWANCE_S))
    stdout = sys.stdout
    sys.stdout = io.StringIO()  # what importing prints is not an outcome
    try:
        import_modules(calls)
    except TimeoutError:
        tops = {call["module"].split(".")[0] for call in calls}
        for name in [key for key in sys.modules if key.split(".")[0] in tops]:
            del sys.modules[name]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdout = stdout


def print_mutant_outcomes(mutants, calls, limit, budget):
    """The calls against each mutant in turn (`{"module", "path", "source"}`: the module's text in place of its file;
    a group's mutants span modules), each in a child forked from this process once it has imported the calls'
    modules; the child puts its mutant in place (mutant_patch), and nothing a child does outlives it. Lines are
    tagged with the mutant's number."""
    _imported_first(calls)
    for number, mutant in enumerate(mutants):
        sys.stdout.flush()
        child = os.fork()
        if child == 0:
            try:
                put_in_place(mutant)
                print_call_outcomes(calls, limit, budget, (number,))
            finally:
                sys.stdout.flush()
                os._exit(0)
        _reap(child, time.monotonic() + budget + IMPORT_ALLOWANCE_S + 5)


def _reap(child, deadline):
    """Wait for the child until `deadline`, then kill it: a mutant's call may block where no alarm reaches."""
    while os.waitpid(child, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(child, 9)
            os.waitpid(child, 0)
            return
        time.sleep(0.005)


if __name__ == "__main__":
    if sys.argv[1] == "--mutants":
        with open(sys.argv[2]) as handle:
            spec = json.load(handle)
        with open(sys.argv[3]) as handle:
            calls = json.load(handle)
        print_mutant_outcomes(spec["mutants"], calls, *map(float, sys.argv[4:6]))
    else:
        with open(sys.argv[1]) as handle:
            print_call_outcomes(json.load(handle), float(sys.argv[2]), float(sys.argv[3]))
