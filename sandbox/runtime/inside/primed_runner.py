"""A command's process started ahead of its command: reads one JSON request ({argv, cwd, env}) from stdin, says it
took it, and becomes argv with that directory and environment, as a plain exec of argv would have started.

`python3 -c SOURCE`, with PYTHONCOERCECLOCALE=0 in its environment: python would otherwise set LC_CTYPE for its
children under a C locale; the variable itself goes before the command starts. An empty stdin (the host closed it
unfed) ends the runner.
"""

import json
import os
import signal
import sys

# Written to stdout once the request is held; the host strips it and knows that the command ran here.
TOOK = b"\x00regrow-runner-took\n"


def main() -> None:
    line = sys.stdin.buffer.readline()
    if not line:
        sys.exit(0)
    request = json.loads(line)
    null = os.open("/dev/null", os.O_RDONLY)  # a plain exec attaches no stdin
    os.dup2(null, 0)
    os.close(null)
    os.write(1, TOOK)
    if request["cwd"]:
        try:
            os.chdir(request["cwd"])
        except OSError as error:  # answered as the engine answers a plain exec's missing directory
            reason = (error.strerror or str(error)).lower()
            os.write(1, f'chdir to cwd ("{request["cwd"]}") set in config.json failed: {reason}\n'.encode())
            os._exit(126)
    os.environ.pop("PYTHONCOERCECLOCALE", None)
    os.environ.update(request["env"])
    for ignored in (signal.SIGPIPE, signal.SIGXFSZ):  # python ignores them, and an ignored signal outlives exec
        signal.signal(ignored, signal.SIG_DFL)
    os.execvp(request["argv"][0], request["argv"])


if __name__ == "__main__":
    main()
