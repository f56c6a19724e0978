"""The HTTP side of ``kvmon serve``: answers scrapes of ``/metrics`` from a few worker threads, each exposition
rendered once per poll, with the system's full listen backlog.

Many scrapers at once is the load this is built for (``bench/serve_load.py``): the standard library's listen
backlog of 5 drops connections past it (a scraper then waits a whole SYN retry, a second and more), and a thread
per scrape puts dozens of threads on the GIL, each scrape waiting behind all of them. Here connections queue in the
kernel's backlog, a few workers take them first in, first out, and a scrape of the same Snapshot in the same format
as one before it is answered with the same bytes. A scraper must send its request within ``REQUEST_DEADLINE_S``,
so one that sends slowly, or never, holds a worker no longer than that. The exposition itself (text or
OpenMetrics by ``Accept``, gzip by ``Accept-Encoding``, ``name[]`` filters) is prometheus_client's.
"""

from __future__ import annotations

import gzip
import io
import math
import queue
import socket
import socketserver
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from kvmon.sources.keepalive import DeadlineReader

BACKLOG = socket.SOMAXCONN  # the system's own cap (net.core.somaxconn) applies
WORKERS = 4
REQUEST_DEADLINE_S = 5.0
MAX_KEPT = 8  # answers kept for the current poll: formats × encodings × filters actually asked for

Answer = tuple[int, list[tuple[str, str]], bytes]


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
        self._kept: OrderedDict[tuple[Any, ...], tuple[Answer, object]] = OrderedDict()
        self._lock = threading.Lock()

    def answer(self, target: str, accept: str | None, accept_encoding: str | None) -> Answer:
        st = self._state()
        key = (id(st), target, accept, accept_encoding)
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and kept[1] is st:  # (an id may be reused once its state is gone)
            return kept[0]
        made = render(self._registry, target, accept, accept_encoding)
        with self._lock:
            self._kept[key] = (made, st)
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        return made


class _Handler(BaseHTTPRequestHandler):
    """One scrape per connection (HTTP/1.0 semantics, as Prometheus expects of a simple exporter); no access log."""

    server: ScrapeServer
    deadline = math.inf

    def setup(self) -> None:
        super().setup()
        self.deadline = time.monotonic() + REQUEST_DEADLINE_S
        self.rfile.close()
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self))

    def handle(self) -> None:
        try:
            super().handle()
        except TimeoutError:  # the request did not arrive in time: drop the connection
            self.close_connection = True

    def _answer(self, with_body: bool) -> None:
        if urlsplit(self.path).path == "/favicon.ico":
            status, headers, body = 200, [("Content-Type", "text/plain")], b""
        else:
            try:
                status, headers, body = self.server.answers.answer(self.path, self.headers.get("Accept"),
                                                                   self.headers.get("Accept-Encoding"))
            except Exception as exc:  # a bug while rendering: this scrape says so, the next one tries again
                print(f"kvmon: could not render the metrics: {type(exc).__name__}: {exc}", file=sys.stderr)
                status, headers = 500, [("Content-Type", "text/plain; charset=utf-8")]
                body = f"kvmon could not render the metrics ({type(exc).__name__})\n".encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def log_message(self, format: str, *args: Any) -> None:
        pass


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
        super().__init__(address, _Handler)
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
                self.finish_request(request, client_address)
            except Exception:  # one broken scrape (a reset connection) must not end the worker
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

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
