"""Read Docker's multiplexed exec stream with an output cap and a hard deadline."""

import io
import socket
import struct
import time
from dataclasses import dataclass, field

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
