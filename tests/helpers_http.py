"""A small threaded HTTP server on 127.0.0.1 serving canned responses per path, for source tests.

Tests set a body, status and headers per path, and can make a path hang, answer slowly, or drop the
connection, so sources are exercised over real HTTP without mocking the client library.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LLAMA_FIXTURES = FIXTURES / "llama-server"


@dataclass
class CannedResponse:
    """What the server answers on one path."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    hang_s: float = 0.0  # accept, then say nothing for this long
    delay_s: float = 0.0  # send headers, then wait before the body
    drop: bool = False  # close the connection without answering


def read_capture(name: str) -> tuple[int, bytes, dict[str, str]]:
    """A capture body plus its status and headers (from ``NAME.headers.txt`` when present)."""
    path = LLAMA_FIXTURES / name
    body = path.read_bytes()
    status, headers = 200, {"Content-Type": "application/json"}
    head = path.with_name(path.name + ".headers.txt")
    if head.exists():
        lines = head.read_text(encoding="utf-8").splitlines()
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                if k.lower() not in ("content-length", "connection", "keep-alive"):
                    headers[k.strip()] = v.strip()
    return status, body, headers


class FixtureServer:
    """Serve canned responses; unknown paths answer llama-server's 404 body."""

    def __init__(self) -> None:
        self.routes: dict[str, CannedResponse] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, headers)
        self.sequences: dict[str, list[CannedResponse]] = {}  # path -> answers in turn (the last repeats)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # one small response must not wait for a delayed ACK

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _answer(self) -> None:
                path = self.path.split("?", 1)[0]
                with server_self._lock:
                    server_self.requests.append((self.command, self.path, dict(self.headers.items())))
                    seq = server_self.sequences.get(path)
                    if seq:
                        server_self.routes[path] = seq.pop(0) if len(seq) > 1 else seq[0]
                    canned = server_self.routes.get(self.path) or server_self.routes.get(path)
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if canned is None:
                    canned = CannedResponse(
                        404,
                        b'{"error":{"message":"File Not Found","type":"not_found_error","code":404}}',
                        {"Content-Type": "application/json"},
                    )
                if canned.hang_s:
                    server_self._stop.wait(canned.hang_s)
                    self.close_connection = True
                    return
                if canned.drop:
                    self.close_connection = True
                    return
                self.send_response(canned.status)
                for k, v in canned.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                if canned.delay_s:
                    server_self._stop.wait(canned.delay_s)
                try:
                    self.wfile.write(canned.body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            do_GET = _answer
            do_POST = _answer

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, path: str, status: int = 200, body: bytes | str = b"", headers: dict[str, str] | None = None) -> None:
        """Answer ``path`` with this status, body and headers."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        with self._lock:
            self.sequences.pop(path, None)
            self.routes[path] = CannedResponse(status, data, dict(headers or {"Content-Type": "application/json"}))

    def set_capture(self, path: str, capture: str) -> None:
        """Answer ``path`` with a llama-server capture file (body, status and headers as recorded)."""
        status, body, headers = read_capture(capture)
        self.set(path, status, body, headers)

    def sequence_captures(self, path: str, captures: list[str]) -> None:
        """Answer ``path`` with these captures in turn, one per request; the last one repeats."""
        answers = []
        for name in captures:
            status, body, headers = read_capture(name)
            answers.append(CannedResponse(status, body, headers))
        with self._lock:
            self.sequences[path] = answers

    def hang(self, path: str, seconds: float) -> None:
        """Accept requests for ``path`` and answer nothing for ``seconds``."""
        with self._lock:
            self.routes[path] = CannedResponse(hang_s=seconds)

    def slow(self, path: str, seconds: float) -> None:
        """Send headers at once but the body only after ``seconds``."""
        with self._lock:
            self.routes[path].delay_s = seconds

    def drop(self, path: str) -> None:
        """Close the connection without an answer."""
        with self._lock:
            self.routes[path] = CannedResponse(drop=True)

    def clear(self, path: str) -> None:
        with self._lock:
            self.routes.pop(path, None)

    def paths_requested(self) -> list[str]:
        with self._lock:
            return [p for _, p, _ in self.requests]

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=2)


def serve_llama_state(server: FixtureServer, state: str = "idle") -> None:
    """Serve the main-run captures of one state (idle, generating, generating-later, idle-after, ...)."""
    for path, stem in (
        ("/health", f"health.{state}.json"),
        ("/props", f"props.{state}.json"),
        ("/slots", f"slots.{state}.json"),
        ("/metrics", f"metrics.{state}.txt"),
        ("/v1/models", f"v1-models.{state}.json"),
    ):
        if (LLAMA_FIXTURES / stem).exists():
            server.set_capture(path, stem)
    if state != "idle":
        for path, stem in (("/health", "health.idle.json"), ("/v1/models", "v1-models.idle.json")):
            if path not in server.routes:
                server.set_capture(path, stem)


def wait_until(pred: object, timeout_s: float = 5.0) -> bool:
    """Poll ``pred()`` until true or timeout; for tests that wait on another thread or process."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port just bound and released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"
