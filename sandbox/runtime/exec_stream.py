"""Read Docker's multiplexed exec stream with an output cap and a hard deadline; feed an exec started ahead."""

import io
import logging
import socket
import struct
import time
from dataclasses import dataclass, field

import docker

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">BxxxL")
_STDOUT, _STDERR = 1, 2


@dataclass
class _CappedBuffer:
    cap: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


@dataclass
class StreamResult:
    stdout: bytes
    stderr: bytes
    stdout_total: int
    stderr_total: int
    deadline_hit: bool

    @property
    def truncated(self) -> bool:
        return self.stdout_total > len(self.stdout) or self.stderr_total > len(self.stderr)


def _buffered_reader(sock: object) -> tuple[io.BufferedReader, socket.socket]:
    """The reader docker-py's HTTP parser read the reply's headers through, and the socket under it.

    That parser may have buffered the first output frames along with the headers (docker-py issue #3332), so the
    stream is read through its buffer, never from the socket docker-py hands back.
    """
    response = getattr(sock, "_response", None)
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    assert isinstance(reader, io.BufferedReader), f"docker-py handed back {type(sock).__name__} without its reply"
    raw = getattr(sock, "_sock", sock)
    assert isinstance(raw, socket.socket), f"docker-py handed back {type(raw).__name__}, not a socket"
    return reader, raw


def read_exec_stream(sock: object, deadline: float, cap: int) -> StreamResult:
    """Drain a non-TTY exec stream until EOF or `deadline` (monotonic), keeping `cap` bytes a stream.

    Bytes past the cap are counted and dropped, so a chatty command cannot exhaust memory;
    the command itself is bounded by its timeout.
    """
    reader, raw = _buffered_reader(sock)
    out, err = _CappedBuffer(cap), _CappedBuffer(cap)
    pending = bytearray()
    deadline_hit = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            deadline_hit = True
            break
        raw.settimeout(remaining)
        try:
            chunk = reader.read1(65536)
        except TimeoutError:
            deadline_hit = True
            break
        except OSError:
            break
        if not chunk:
            break
        pending += chunk
        while len(pending) >= _HEADER.size:
            kind, size = _HEADER.unpack_from(pending)
            if len(pending) < _HEADER.size + size:
                break
            payload = bytes(pending[_HEADER.size : _HEADER.size + size])
            del pending[: _HEADER.size + size]
            (err if kind == _STDERR else out).add(payload)
    return StreamResult(bytes(out.data), bytes(err.data), out.total, err.total, deadline_hit)


class FedExec:
    """A created exec, started now with its stdin attached: `feed` sends its whole input and reads its stream to the
    end; `close` ends its input unfed, so a process waiting on it reads the end at once and exits (a bare close of
    the socket left it waiting for seconds)."""

    def __init__(self, api: docker.APIClient, exec_id: str):
        self.exec_id = exec_id
        self._sock = api.exec_start(exec_id, socket=True)
        self._raw = getattr(self._sock, "_sock", self._sock)
        assert isinstance(self._raw, socket.socket), f"docker-py handed back {type(self._raw).__name__}, not a socket"

    def feed(self, data: bytes, deadline: float, cap: int) -> StreamResult:
        """Send `data`, end the input, and read the stream until EOF or `deadline`; OSError when the stream broke."""
        try:
            self._raw.settimeout(max(0.1, deadline - time.monotonic()))
            self._raw.sendall(data)
            self._raw.shutdown(socket.SHUT_WR)
            return read_exec_stream(self._sock, deadline, cap)
        finally:
            self.close()

    def close(self) -> None:
        try:
            self._raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # fed already, or the engine closed it
        try:
            self._sock.close()
        except OSError as error:
            log.debug("closing a fed exec's stream: %s", error)
