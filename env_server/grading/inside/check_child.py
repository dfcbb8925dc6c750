"""The check child of a graded run: each recorded call of the deleted unit, in a process forked for it, its outcome
sent up the launcher's pipe as data.

`python check_child.py CONFIG FD`. The config holds inputs only (module, qualified name, literal arguments, the
pickle recorded at synthesis of a method's receiver and of arguments that are no literals, and a class's program of
steps); what the calls should
give never enters this container. An outcome is the returned value described as proto.call_values has it (or its
type's name where no description stands for it), the name of the exception's class, the receiver's state and the
pickled arguments after the call. The grader compares them with the original's; whatever this process sends, only
the right values earn anything.
"""

import importlib
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # for the values module shipped beside this file, and only while it is imported
from regrow_call_values import replay, replay_program  # noqa: E402

sys.path.remove(HERE)


def outcome(call, limit):
    """What one call, or one program of a deleted class, gives, as data (see regrow_call_values)."""
    if call.get("steps") is not None:
        return replay_program(call["module"], call["qualname"], call["steps"], call.get("reads", []), limit)
    inputs, take = call.get("inputs"), call.get("take")
    return replay(call["module"], call["qualname"], call["args"], call["kwargs"], inputs, limit, take)


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
