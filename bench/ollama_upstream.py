"""A raw-socket Ollama-style upstream for the proxy benches: listens on a loopback port, reads each request's head
and body, answers ``GET /api/version`` itself and hands every other request to ``stream`` (a subclass's answer)."""

from __future__ import annotations

import socket
import threading

VERSION_BODY = b'{"version":"0.33.0"}'
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"


class RawUpstream:
    """One thread per connection; ``stream(conn, body)`` writes the answer (the connection is closed after it)."""

    def __init__(self, backlog: int = 16) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def stream(self, conn: socket.socket, body: bytes) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = conn.makefile("rb")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = f.readline()
            if not line:
                return
            head += line
        length = next((int(h.split(b":", 1)[1]) for h in head.split(b"\r\n")
                       if h.lower().startswith(b"content-length:")), 0)
        body = f.read(length)
        try:
            if head.split(b" ", 2)[1] == b"/api/version":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (len(VERSION_BODY), VERSION_BODY))
            else:
                self.stream(conn, body)
        finally:
            conn.close()
