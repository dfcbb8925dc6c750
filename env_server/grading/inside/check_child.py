"""The check child of a graded run: each recorded call of the deleted unit, in a process forked for it, its outcome
sent up the launcher's pipe as data.

`python check_child.py CONFIG FD`. The config holds inputs only (module, qualified name, literal arguments, the
pickle recorded at synthesis of a method's receiver and of arguments that are no literals, and a class's program of
steps); what the calls should give never enters this container. An outcome is the returned value described as
proto.call_values has it (or its type's name where no description stands for it), the exception's class and the
names of its bases, the receiver's state and the pickled arguments after the call.

Each call reports on a pipe of its own, made after the package was imported and handed to that call's process
alone; this process sends one frame a call, `{"i": index, "channel": [the lines that pipe carried]}`. The grader
takes a call's outcome only from a channel that carried exactly one record, and counts a second frame for a call as
a forged grading: whatever this process sends, only the right values earn anything.
"""

import importlib
import json
import os
import select
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # for the replay and values modules shipped beside this file, and only while imported
from regrow_call_replay import replay, replay_program  # noqa: E402

sys.path.remove(HERE)
MAX_CHANNEL_BYTES = 1 << 20  # one call's outcome is well under this; past it the call's channel is cut off


def outcome(call, limit):
    """What one call, or one program of a deleted class, gives, as data (see regrow_call_replay)."""
    if call.get("steps") is not None:
        return replay_program(call["module"], call["qualname"], call["steps"], call.get("reads", []), limit)
    return replay(call, limit)


def read_channel(read_end, deadline):
    """What a call's pipe carried until every writer closed it, or the deadline passed (then None)."""
    chunks, size = [], 0
    while time.monotonic() < deadline:
        ready, _, _ = select.select([read_end], [], [], 0.05)
        if not ready:
            continue
        data = os.read(read_end, 1 << 16)
        if not data:
            return b"".join(chunks)
        size += len(data)
        if size <= MAX_CHANNEL_BYTES:
            chunks.append(data)
    return None


def run_forked(index, call, limit, out_fd):
    """One call in a child process that writes its line on a pipe made for it and dies; killed past `limit`."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.close(out_fd)  # the launcher's pipe is this process's parent's alone
        try:
            line = json.dumps({"i": index, **outcome(call, limit)}) + "\n"
        except BaseException as error:
            line = json.dumps({"i": index, "raised": type(error).__name__}) + "\n"
        os.write(write_end, line.encode())
        os._exit(0)
    os.close(write_end)
    carried = read_channel(read_end, time.monotonic() + limit + 2)
    os.close(read_end)
    try:
        os.kill(pid, signal.SIGKILL)  # it has written, or ran out of time: either way it is done
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    if carried is None:
        frame = {"i": index, "channel": [], "timeout": True}
    else:
        frame = {"i": index, "channel": carried.decode("utf-8", errors="replace").splitlines()}
    os.write(out_fd, (json.dumps(frame) + "\n").encode())


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
