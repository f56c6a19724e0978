"""A raw-socket HTTP/1.1 upstream answering scripted bytes, and the socket helpers the proxy tests read with."""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kvmon.proxy.server import ProxyServer


def chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


@dataclass
class Script:
    """A raw HTTP answer: pieces written one by one; a gate makes the server wait for the test between pieces."""

    pieces: list[bytes]
    gated: bool = False
    delay_s: float = 0.0
    close_after: bool = False


@dataclass
class Upstream:
    """A raw-socket HTTP/1.1 server: records each request's bytes, answers a scripted byte sequence."""

    routes: dict[str, Callable[[bytes], Script]] = field(default_factory=dict)
    requests: list[tuple[str, bytes, bytes]] = field(default_factory=list)  # (path, head, body)
    written: dict[int, bytearray] = field(default_factory=dict)  # request number -> bytes sent
    gate: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    write_failed: threading.Event = field(default_factory=threading.Event)
    version: str | None = "0.33.0"

    def __post_init__(self) -> None:
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                f = sock.makefile("rb")
                while True:
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        line = f.readline()
                        if not line:
                            return
                        head += line
                    lines = head.decode("latin-1").split("\r\n")
                    path = lines[0].split(" ")[1]
                    length = 0
                    for h in lines[1:]:
                        if h.lower().startswith("content-length:"):
                            length = int(h.split(":", 1)[1])
                    body = f.read(length) if length else b""
                    if path == "/api/version":
                        if owner.version is None:
                            data = b'{"error":{"code":404,"message":"File Not Found"}}'
                            status = "404 Not Found"
                        else:
                            data, status = json.dumps({"version": owner.version}).encode(), "200 OK"
                        sock.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                        continue
                    with lock:
                        owner.requests.append((path, head, body))
                        n = len(owner.requests)
                        owner.written[n] = bytearray()
                    script = owner.routes[path](body)
                    try:
                        for i, piece in enumerate(script.pieces):
                            if script.gated and i > 1:
                                if not owner.gate.acquire(timeout=10):
                                    return
                            elif script.delay_s and i > 1:
                                time.sleep(script.delay_s)
                            sock.sendall(piece)
                            owner.written[n] += piece
                    except OSError:
                        owner.write_failed.set()
                        return
                    if script.close_after:
                        sock.shutdown(socket.SHUT_WR)
                        return

        lock = threading.Lock()
        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            request_queue_size = socket.SOMAXCONN  # as Ollama's listen backlog: not the 5 of Python's

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def recv_all(s: socket.socket) -> bytes:
    out = b""
    while data := s.recv(65536):
        out += data
    return out


def get_stats(p: ProxyServer) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=5)
    conn.request("GET", "/kvmon/stats")
    resp = conn.getresponse()
    assert resp.status == 200
    doc = json.loads(resp.read())
    conn.close()
    return doc
