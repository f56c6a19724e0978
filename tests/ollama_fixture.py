"""A canned Ollama on 127.0.0.1 answering from the captured fixtures, for the Ollama source's tests."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

OLLAMA_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ollama"


SHOW_FILES = {
    "llama3.1:8b": "show.llama3.1-8b",
    "granite4:tiny-h": "show.granite4-tiny-h",
    "gemma3:27b": "show.gemma3-27b",
}


def fixture_bytes(name: str) -> bytes:
    return (OLLAMA_FIXTURES / name).read_bytes()


class OllamaFixture:
    """Serve ``/api/version``, ``/api/ps`` and ``/api/show``; any path can be overridden or made to hang."""

    def __init__(self, ps: str = "ps.full-offload.json", version: str = "version.json") -> None:
        self.overrides: dict[str, tuple[int, bytes]] = {}
        self.hangs: dict[str, float] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.stream_lines: list[bytes] = []  # when set, /api/chat and /api/generate stream these, chunked
        self.stream_delay_s = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.set_file("/api/ps", ps)
        self.set_file("/api/version", version)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()  # headers and body go out as separate writes: no Nagle wait between them
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                path = self.path.split("?", 1)[0]
                with owner._lock:
                    owner.requests.append((self.command, path, body))
                    hang = owner.hangs.get(path)
                    override = owner.overrides.get(path)
                if hang:
                    owner._stop.wait(hang)
                    self.close_connection = True
                    return
                if path in ("/api/chat", "/api/generate") and owner.stream_lines:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-ndjson")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    try:
                        for line in owner.stream_lines:
                            owner._stop.wait(owner.stream_delay_s)
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                            self.wfile.flush()
                        self.wfile.write(b"0\r\n\r\n")
                    except (BrokenPipeError, ConnectionResetError):
                        self.close_connection = True
                    return
                if override is not None:
                    status, data = override
                elif path == "/api/show" and self.command == "POST" and isinstance(body, dict):
                    stem = SHOW_FILES.get(str(body.get("model")))
                    verbose = bool(body.get("verbose"))
                    f = OLLAMA_FIXTURES / f"{stem}{'.verbose' if verbose else ''}.json" if stem else None
                    if f is None or not f.exists():
                        status, data = 404, fixture_bytes("error.model-not-found.json")
                    else:
                        status, data = 200, f.read_bytes()
                else:
                    status, data = 404, b"404 page not found"
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
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

    def set(self, path: str, status: int, body: bytes | str) -> None:
        data = body.encode() if isinstance(body, str) else body
        with self._lock:
            self.overrides[path] = (status, data)

    def set_file(self, path: str, name: str) -> None:
        self.set(path, 200, fixture_bytes(name))

    def clear(self, path: str) -> None:
        with self._lock:
            self.overrides.pop(path, None)

    def hang(self, path: str, seconds: float) -> None:
        with self._lock:
            self.hangs[path] = seconds

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for _, p, _ in self.requests if p == path)

    def bodies(self, path: str) -> list[Any]:
        with self._lock:
            return [b for _, p, b in self.requests if p == path]

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=2)
