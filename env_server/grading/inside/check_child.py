"""The check child of a graded run: each recorded call of the deleted unit, in a process forked for it, its outcome
sent up the launcher's pipe as data.

`python check_child.py CONFIG FD`. The config holds inputs only (module, qualified name, arguments as literal text,
and for a method the receiver as the pickle recorded at synthesis); what the calls should give never enters this
container. An outcome is the returned value as literal text (or its type's name when it is no literal), the name of
the exception's class, and for a method the receiver's state after the call. The grader compares them with the
original's outcomes; whatever this process sends, only the right values earn anything.
"""

import ast
import base64
import importlib
import json
import math
import os
import pickle
import signal
import sys
import time

MAX_NODES = 2000
MAX_TEXT = 64 * 1024


class Overtime(BaseException):
    """Raised into a call that ran past its time limit."""


def _overtime(signum, frame):
    raise Overtime


def literal_text(value):
    """`repr(value)` when `value` is built of exact literal types only (finite floats), in few enough nodes; else
    None. Exact types: a subclass's `__repr__` or `__eq__` takes no part."""
    stack, nodes = [value], 0
    while stack:
        item = stack.pop()
        nodes += 1
        kind = type(item)
        if nodes > MAX_NODES:
            return None
        if kind is float and not math.isfinite(item):
            return None
        if kind in (tuple, list, set, frozenset):
            stack.extend(item)
        elif kind is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif kind not in (int, float, str, bytes, bool, complex) and item is not None:
            return None
    text = repr(value)
    return text if len(text) <= MAX_TEXT else None


def state_of(receiver):
    """The receiver's instance attributes as literal text (those holding literals), or None without a `__dict__`."""
    attributes = getattr(receiver, "__dict__", None)
    if type(attributes) is not dict:
        return None
    plain = {name: item for name, item in attributes.items() if type(name) is str and literal_text(item) is not None}
    return literal_text(plain)


def _target(call):
    if call.get("receiver"):
        receiver = pickle.loads(base64.b64decode(call["receiver"]))
        return receiver, getattr(receiver, call["qualname"].rsplit(".", 1)[-1])
    found = importlib.import_module(call["module"])
    for part in call["qualname"].split("."):
        found = getattr(found, part)
    return None, found


def outcome(call, limit):
    """What one call gives: returned (literal text), kind (type name of a non-literal), raised, state."""
    signal.setitimer(signal.ITIMER_REAL, limit)
    found = {}
    receiver = None
    try:
        receiver, function = _target(call)
        result = function(*ast.literal_eval(call["args"]), **ast.literal_eval(call["kwargs"]))
        found["returned"] = literal_text(result)
        if found["returned"] is None:
            found["kind"] = type(result).__name__
    except Overtime:
        found["timeout"] = True
    except BaseException as error:  # SystemExit and KeyboardInterrupt are outcomes too
        found["raised"] = type(error).__name__
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if call.get("receiver") and receiver is not None:
        found["state"] = state_of(receiver)
    return found


def run_forked(index, call, limit, out_fd):
    """One call in a child process that dies after sending its line; the parent kills it past `limit`."""
    pid = os.fork()
    if pid == 0:
        try:
            line = json.dumps({"i": index, **outcome(call, limit)}) + "\n"
        except BaseException as error:
            line = json.dumps({"i": index, "raised": type(error).__name__}) + "\n"
        os.write(out_fd, line.encode())
        os._exit(0)
    deadline = time.monotonic() + limit + 2
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.write(out_fd, (json.dumps({"i": index, "timeout": True}) + "\n").encode())


def main(argv):
    with open(argv[1]) as handle:
        config = json.load(handle)
    out_fd = int(argv[2])
    sys.path.insert(0, os.getcwd())  # as synthesis replayed the calls: `python -m` from the workspace
    signal.signal(signal.SIGALRM, _overtime)
    for module in sorted({call["module"] for call in config["calls"]}):
        try:  # imported once here, so that each forked call starts from the imported package
            importlib.import_module(module)
        except BaseException:  # the forked calls then fail to import it and say so
            pass
    for index, call in enumerate(config["calls"]):
        run_forked(index, call, config["call_timeout_s"], out_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
