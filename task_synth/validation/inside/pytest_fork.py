"""`python -m pytest` without paying for pytest's import each time: a server forks each run from an interpreter that has
imported pytest and nothing of the workspace.

`python pytest_fork.py serve SOCKET` imports pytest and waits. `python pytest_fork.py SOCKET ARGS...` is the client:
it hands the server its stdin, stdout and stderr, its argv, environment and directory; the server forks a child that
runs pytest on them, in its own process group, and sends back its exit status. The client exits with it, so a command
line cannot tell the two apart.

Why a child sees what a fresh `python -m pytest` sees: the server never imports the workspace, a conftest or a plugin
(only pytest's own modules), and every child is forked from that pristine server, never from another child. What a
fresh interpreter reads once at start-up (PYTHON* variables, the locale, TZ) cannot change in a child, so when the
client's differ from the server's (a run under another hash seed) the client runs `python -m pytest` itself instead.
A client that ends (its command's timeout killed it) takes its child's whole process group with it.
"""

import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys

HEADER = struct.Struct("!I")
STATUS = struct.Struct("!i")


def startup_environment(environ) -> dict:
    """The variables a Python process reads once, at start-up (or at its first import of `time`)."""
    return {
        name: value
        for name, value in environ.items()
        if name.startswith(("PYTHON", "LC_", "COVERAGE_")) or name in ("LANG", "LANGUAGE", "TZ")
    }


def _send_message(conn, payload: bytes, fds=()) -> None:
    data = HEADER.pack(len(payload)) + payload
    sent = socket.send_fds(conn, [data], list(fds)) if fds else conn.send(data)
    conn.sendall(data[sent:])


def _read_message(conn) -> tuple:
    data, fds, _flags, _address = socket.recv_fds(conn, 65536, 3)
    if len(data) < HEADER.size:
        raise ConnectionError("short request")
    (length,) = HEADER.unpack_from(data)
    data = data[HEADER.size :]
    while len(data) < length:
        more = conn.recv(length - len(data))
        if not more:
            raise ConnectionError("request cut short")
        data += more
    return json.loads(data), fds


def _child(conn, request: dict, fds: list) -> int:
    """In the forked child: become a fresh `python -m pytest` in the client's place, and run it."""
    os.setpgid(0, 0)
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    conn.close()
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # what `-m` puts first
    # The server looked at sys.path's folders when they may not have existed (the plugins are written per run): a
    # fresh interpreter would look again.
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    sys.argv = ["-m", *request["argv"]]
    try:  # pytest's own __main__, as `-m` runs it: its entry point differs from one pytest release to the next
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        code = exit.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def serve(path: str) -> int:
    """Accept clients until killed; returns only in a forked child, with that child's exit status."""
    import pytest  # noqa: F401  (the import every child is spared)

    return _Server(path).run()


class _Server:
    """The listening socket, the pipe a child's exit wakes it on, and each running child's client connection; one
    handler per kind of event: a child exited (wake), a client connected (listener), a client spoke or went away."""

    def __init__(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path + ".partial")
        self.listener.listen(64)
        with open(path + ".env", "w") as out:
            json.dump(startup_environment(os.environ), out)
        os.rename(path + ".partial", path)  # a client connects only once the environment is on record
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "listener")
        # A child's exit wakes the loop at once (SIGCHLD writes to this pipe), so its status goes back without delay.
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_write)
        self.selector.register(self.wake_read, selectors.EVENT_READ, "wake")
        self.children: dict = {}  # pid -> client connection

    def run(self) -> int:
        """Serve until killed; returns only in a forked child, with that child's exit status."""
        handlers = {"wake": self._woken, "listener": self._accept}
        while True:
            for key, _events in self.selector.select(timeout=1.0):
                code = handlers.get(key.data, self._client_spoke)(key.data)
                if code is not None:  # in the forked child, its run done
                    return code
            self._reap_children()

    def _woken(self, _data) -> None:
        """A child exited: empty the wake-up pipe (the loop reaps it next)."""
        while True:
            try:
                if not os.read(self.wake_read, 512):
                    return
            except BlockingIOError:
                return

    def _accept(self, _data):
        """A client connected: fork its run. Returns the run's exit status in the child, None in the server."""
        conn, _ = self.listener.accept()
        conn.settimeout(10)  # a client that connects and says nothing must not stall the others
        try:
            request, fds = _read_message(conn)
        except (ConnectionError, ValueError, OSError):
            conn.close()
            return None
        conn.settimeout(None)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._close_in_child()
            return _child(conn, request, fds)
        try:  # the child does this too: whichever runs first, a kill of its group finds it
            os.setpgid(pid, pid)
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        print(f"run {pid}: {' '.join(request['argv'])[:200]}", file=sys.stderr, flush=True)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        return None

    def _close_in_child(self) -> None:
        """What the server holds and a run must not: its signal wiring, its sockets, the other runs' clients."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        self.listener.close()
        os.close(self.wake_read)
        os.close(self.wake_write)
        for other in self.children.values():
            other.close()

    def _client_spoke(self, pid) -> None:
        """A client spoke or went away: it never speaks, so its child is orphaned and killed with its group."""
        client_conn = self.children[pid]
        if not client_conn.recv(1):
            self.selector.unregister(client_conn)
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _reap_children(self) -> None:
        """Send each exited child's status to its client, and close the connection."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            if _registered(self.selector, conn):
                self.selector.unregister(conn)
            code = os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(STATUS.pack(code if code >= 0 else 128 - code))
            except OSError:
                pass
            conn.close()


def _registered(selector, conn) -> bool:
    try:
        selector.get_key(conn)
    except KeyError:
        return False
    return True


def _plain(argv: list) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *argv])


def client(path: str, argv: list) -> int:
    """Run pytest with `argv` through the server at `path`; `python -m pytest` itself where the server cannot."""
    try:
        with open(path + ".env") as recorded:
            same = json.load(recorded) == startup_environment(os.environ)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    except (OSError, ValueError):
        same = False
    if not same:
        _plain(argv)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    _send_message(conn, json.dumps(request).encode(), (0, 1, 2))
    status = b""
    while len(status) < STATUS.size:
        more = conn.recv(STATUS.size - len(status))
        if not more:  # the server died under the run: say so, as a killed process would
            sys.stderr.write("pytest fork server went away during the run\n")
            return 70
        status += more
    return STATUS.unpack(status)[0]


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        sys.exit(serve(sys.argv[2]))
    sys.exit(client(sys.argv[1], sys.argv[2:]))
