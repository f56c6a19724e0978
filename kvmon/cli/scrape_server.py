"""The HTTP side of ``kvmon serve``: answers scrapes of ``/metrics`` from a few worker threads, each answer
rendered once per poll, with the system's full listen backlog.

Many scrapers at once is the load this is built for (``bench/serve_load.py``): the standard library's listen
backlog of 5 drops connections past it (a scraper then waits a whole SYN retry, a second and more), and a thread
per scrape puts dozens of threads on the GIL, each scrape waiting behind all of them. Here connections queue in the
kernel's backlog, a few workers take them first in, first out, each request is read by h11, and a scrape of the
same Snapshot in the same format as one before it gets the same bytes, head and body, in one write. A scraper must
send its request within ``REQUEST_DEADLINE_S``, so one that sends slowly, or never, holds a worker no longer than
that; the answer closes the connection. The exposition itself (text or OpenMetrics by ``Accept``, gzip by
``Accept-Encoding``, ``name[]`` filters) is prometheus_client's.
"""

from __future__ import annotations

import gzip
import queue
import socket
import socketserver
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

BACKLOG = socket.SOMAXCONN  # the system's own cap (net.core.somaxconn) applies
WORKERS = 4
REQUEST_DEADLINE_S = 5.0
MAX_REQUEST_BYTES = 16 * 1024
MAX_KEPT = 8  # answers kept for the current poll: formats × encodings × filters actually asked for

Answer = tuple[int, list[tuple[str, str]], bytes]


def wire(answer: Answer, *, with_body: bool = True) -> bytes:
    """An answer as the bytes sent: status line, headers, Content-Length, ``Connection: close``, body."""
    status, headers, body = answer
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", *(f"{k}: {v}" for k, v in headers),
             f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (body if with_body else b"")


def render(registry: CollectorRegistry, target: str, accept: str | None, accept_encoding: str | None) -> Answer:
    """The exposition for one scrape (prometheus_client's encoders), as (status, headers, body)."""
    params = parse_qs(urlsplit(target).query)
    names = params.get("name[]")
    reg = registry.restricted_registry(names) if names else registry
    encoder, content_type = choose_encoder(accept or "")
    body = encoder(reg)
    headers = [("Content-Type", content_type)]
    if gzip_accepted(accept_encoding or ""):
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    return 200, headers, body


class RenderedOnce:
    """Answers kept per poll: the same Snapshot asked for in the same way gets the same bytes, rendered once."""

    def __init__(self, registry: CollectorRegistry, state: Callable[[], object]) -> None:
        self._registry = registry
        self._state = state
        self._kept: OrderedDict[tuple[Any, ...], tuple[bytes, object]] = OrderedDict()
        self._lock = threading.Lock()

    def answer(self, method: str, target: str, accept: str | None, accept_encoding: str | None) -> bytes:
        """The bytes to send for one request (``method`` GET or HEAD)."""
        st = self._state()
        key = (id(st), method, target, accept, accept_encoding)
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and kept[1] is st:  # (an id may be reused once its state is gone)
            return kept[0]
        if urlsplit(target).path == "/favicon.ico":
            made: Answer = (200, [("Content-Type", "text/plain")], b"")
        else:
            try:
                made = render(self._registry, target, accept, accept_encoding)
            except Exception as exc:  # a bug while rendering: this scrape says so, the next one tries again
                print(f"kvmon: could not render the metrics: {type(exc).__name__}: {exc}", file=sys.stderr)
                return wire((500, [("Content-Type", "text/plain; charset=utf-8")],
                             f"kvmon could not render the metrics ({type(exc).__name__})\n".encode()))
        data = wire(made, with_body=method != "HEAD")
        with self._lock:
            self._kept[key] = (data, st)
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        return data


class ScrapeServer(socketserver.TCPServer):
    """Accepted connections handled in arrival order by ``WORKERS`` threads; more wait in the queue and, past
    it, in the listen backlog."""

    allow_reuse_address = True
    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], answers: RenderedOnce, *, family: int = socket.AF_INET,
                 backlog: int = BACKLOG) -> None:
        self.address_family = family
        self.request_queue_size = backlog
        self.answers = answers
        self._queue: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()
        self._pool: list[threading.Thread] = []
        super().__init__(address, socketserver.BaseRequestHandler)
        self._pool = [threading.Thread(target=self._work, name=f"kvmon-serve-{i}", daemon=True)
                      for i in range(WORKERS)]
        for t in self._pool:
            t.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        self._queue.put((request, client_address))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            request, client_address = item
            try:
                self._scrape(request)
            except Exception:  # one broken scrape (a reset connection) must not end the worker
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def _scrape(self, sock: socket.socket) -> None:
        """Read one request (within the deadline) and send its answer; anything but GET or HEAD gets 405."""
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                sock.sendall(wire((400, [("Content-Type", "text/plain")], b"bad request\n")))
                return
            if event is not h11.NEED_DATA:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return  # the request never came in time: the connection is dropped
            sock.settimeout(left)
            try:
                data = sock.recv(MAX_REQUEST_BYTES)
            except TimeoutError:
                return
            conn.receive_data(data)
        if not isinstance(event, h11.Request):
            return  # the scraper closed before sending a request
        method = event.method.decode("ascii", "replace")
        if method not in ("GET", "HEAD"):
            sock.sendall(wire((405, [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")], b"")))
            return
        headers = {k: v.decode("latin-1") for k, v in event.headers}  # h11 gives lower-case names
        sock.settimeout(REQUEST_DEADLINE_S)
        sock.sendall(self.answers.answer(method, event.target.decode("latin-1"), headers.get(b"accept"),
                                         headers.get(b"accept-encoding")))

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a scraper that went away mid-answer is its own business
        super().handle_error(request, client_address)

    def server_close(self) -> None:
        super().server_close()
        for _ in self._pool:
            self._queue.put(None)
        for t in self._pool:
            t.join(2)
