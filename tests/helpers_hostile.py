"""Hostile peers on 127.0.0.1 for the fault tests: a raw TCP server whose handler owns the socket, so it can
answer what no HTTP library would send (a head dripped byte by byte, a reset before answering, an endless head).

Test doubles only: every handler ends when the test stops the server, so nothing outlives its test.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

Handler = Callable[[socket.socket, threading.Event], None]


class RawServer:
    """Accepts connections on 127.0.0.1 and runs ``handler(sock, stopped)`` for each on its own thread."""

    def __init__(self, handler: Handler, *, backlog: int = 64) -> None:
        self._handler = handler
        self.stopped = threading.Event()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(backlog)
        self._listener.settimeout(0.05)
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True, name="raw-server")
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self._conns.append(conn)
                self.accepted += 1
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self._handler(conn, self.stopped)

    def stop(self) -> None:
        """End every handler: the listener and all accepted connections are closed."""
        self.stopped.set()
        self._thread.join(2)
        self._listener.close()
        with self._lock:
            for c in self._conns:
                with contextlib.suppress(OSError):
                    c.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_request_head(sock: socket.socket, limit: int = 65536) -> bytes:
    """Bytes up to the blank line ending a request head (or what came before the peer stopped)."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) < limit:
        piece = sock.recv(4096)
        if not piece:
            break
        data += piece
    return data


def drip_head(interval_s: float = 0.2) -> Handler:
    """A server that reads a request, then sends a response head one byte every ``interval_s``, never ending it."""

    def handler(sock: socket.socket, stopped: threading.Event) -> None:
        read_request_head(sock)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X-Slow: " + b"a" * 100_000
        for byte in head:
            if stopped.wait(interval_s):
                return
            sock.sendall(bytes([byte]))

    return handler


def reset_before_answering(sock: socket.socket, stopped: threading.Event) -> None:
    """Read the request, then close with a TCP reset (SO_LINGER 0) before a byte of answer."""
    read_request_head(sock)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def listen_backlog(sock: socket.socket) -> int | None:
    """The accept-queue limit of a listening TCP socket (Linux ``TCP_INFO``: ``tcpi_sacked`` holds it), else None."""
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, 104)
    except OSError:
        return None
    # struct tcp_info: 8 one-byte fields, then u32 rto, ato, snd_mss, rcv_mss, unacked, sacked, ...
    return int(struct.unpack_from("I", raw, 28)[0]) if len(raw) >= 32 else None
