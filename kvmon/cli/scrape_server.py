"""The HTTP side of ``kvmon serve``: prometheus_client's WSGI app (``make_wsgi_app``: text or OpenMetrics by
``Accept``, gzip by ``Accept-Encoding``, ``name[]`` filters) answered from one thread with one selector, made fit
for an exporter that other machines can reach.

- A connection must send its whole request head (read by h11) within ``HEAD_DEADLINE_S`` of its accept, or it is
  closed; an answer the client does not take within ``SEND_TIMEOUT_S`` is dropped. A client that trickles a byte a
  second, sends nothing or reads nothing holds no thread, only a socket, and only that long.
- At most ``PER_ADDRESS`` connections from one client address and ``MAX_CONNECTIONS`` in all are open
  (``kvmon.core.admission``: past a bound, the one waiting longest for its head is closed for the new one).
- Listening on loopback, a request whose ``Host`` is not a loopback name or address is refused (DNS rebinding).
- The system's listen backlog (the standard library's 5 drops connections past it: a scraper then waits a second).
- Each answer is rendered once per poll: the same Snapshot asked for in the same way gets the same bytes.

Why not prometheus_client's own server (wsgiref, a thread per connection): at 50 scrapers at once on a busy 2-core
machine it gave p99 72–86 ms and 1,400–1,900 scrapes/s (``bench/serve_load.py``), past the 50 ms the exporter
promises, and it has no deadline from a connection's accept.
"""

from __future__ import annotations

import collections
import functools
import queue
import selectors
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import h11
from prometheus_client import CollectorRegistry, make_wsgi_app

from kvmon.core.admission import Admission
from kvmon.core.locality import host_header_allowed, is_loopback_host

BACKLOG = socket.SOMAXCONN  # the system's own cap (net.core.somaxconn) applies
HEAD_DEADLINE_S = 5.0  # from accept to the end of the request head
SEND_TIMEOUT_S = 10.0  # from the end of the head to the last byte of the answer taken
PER_ADDRESS = 64  # connections open from one client address (Prometheus uses one per target)
MAX_CONNECTIONS = 512  # connections open in all
MAX_REQUEST_BYTES = 16 * 1024
MAX_KEPT = 8  # answers kept for the current poll: formats × encodings × filters actually asked for
WORKERS = 4  # threads that hand answers to the kernel and close connections (that work then runs on every core)
_WAKE = object()  # the selector key of the socket the workers wake the loop with

App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wire(status: str, headers: list[tuple[str, str]], body: bytes, *, with_body: bool = True) -> bytes:
    """An answer as the bytes sent, written by h11: status line, headers, Content-Length, ``Connection: close``,
    body."""
    code, _, reason = status.partition(" ")
    head = h11.Connection(h11.SERVER).send(h11.Response(status_code=int(code), reason=reason, headers=[
        *((k, v) for k, v in headers if k.lower() != "content-length"), ("Content-Length", str(len(body))),
        ("Connection", "close")]))
    return (head or b"") + (body if with_body else b"")


REFUSED_HOST = wire("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")],
                    b"kvmon serve listens on loopback: ask it as localhost or 127.0.0.1 (Host refused)\n")
BAD_REQUEST = wire("400 Bad Request", [], b"bad request\n")


class RenderedOnce:
    """The bytes to send for a request, from prometheus_client's WSGI app, kept per poll (the state ``state()``
    returns, compared by identity): scrapes between two polls get the same bytes without rendering again."""

    def __init__(self, registry: CollectorRegistry, state: Callable[[], object]) -> None:
        self._app: App = make_wsgi_app(registry)
        self._state = state
        self._kept: OrderedDict[tuple[Any, ...], tuple[bytes, object]] = OrderedDict()
        self._lock = threading.Lock()

    def answer(self, method: str, target: str, accept: str | None, accept_encoding: str | None) -> bytes:
        """The bytes to send for one request (``HEAD``: the head alone)."""
        st = self._state()
        key = (id(st), method, target, accept, accept_encoding)
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and kept[1] is st:  # (an id may be reused once its state is gone)
            return kept[0]
        parts = urlsplit(target)
        environ = {"REQUEST_METHOD": "GET" if method == "HEAD" else method, "PATH_INFO": unquote(parts.path),
                   "QUERY_STRING": parts.query, "HTTP_ACCEPT": accept or "",
                   "HTTP_ACCEPT_ENCODING": accept_encoding or ""}
        said: list[Any] = []
        try:
            body = b"".join(self._app(environ, lambda status, headers, *_: said.extend((status, headers))))
        except Exception as exc:  # a bug while rendering: this scrape says so, the next one tries again
            print(f"kvmon: could not render the metrics: {type(exc).__name__}: {exc}", file=sys.stderr)
            return wire("500 Internal Server Error", [("Content-Type", "text/plain; charset=utf-8")],
                        f"kvmon could not render the metrics ({type(exc).__name__})\n".encode())
        data = wire(str(said[0]), list(said[1]), body, with_body=method != "HEAD")
        with self._lock:
            self._kept[key] = (data, st)
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        return data


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    address: str
    deadline: float  # for the head, then for the answer to be taken
    parser: h11.Connection = field(default_factory=lambda: h11.Connection(h11.SERVER,
                                                                          max_incomplete_event_size=MAX_REQUEST_BYTES))
    out: memoryview | None = None
    watched: bool = False  # registered with the selector


class ScrapeServer:
    """The exporter's HTTP server (see the module): ``serve_forever`` on a thread, ``shutdown``, ``server_close``."""

    def __init__(self, address: tuple[str, int], answers: RenderedOnce, *, family: int = socket.AF_INET,
                 backlog: int = BACKLOG) -> None:
        self.answers = answers
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(backlog)
        except BaseException:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self.check_host = is_loopback_host(str(self.server_address[0]))
        self.admission = Admission(PER_ADDRESS, MAX_CONNECTIONS)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.socket, selectors.EVENT_READ, None)
        self._conns: set[_Conn] = set()
        self._by_deadline: collections.deque[_Conn] = collections.deque()  # heads, in accept order
        self._sending: collections.deque[_Conn] = collections.deque()  # answers, in the order they began
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._serving = False
        # an answer goes to a worker; one the client did not take at once comes back to the loop to finish
        self._work: queue.SimpleQueue[tuple[_Conn, bytes] | None] = queue.SimpleQueue()
        self._back: collections.deque[tuple[_Conn, memoryview]] = collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._workers = [threading.Thread(target=self._deliver, name=f"kvmon-serve-{i}", daemon=True)
                         for i in range(WORKERS)]
        for t in self._workers:
            t.start()

    # -- the loop

    def serve_forever(self, poll_interval: float = 0.05) -> None:
        """Serve until ``shutdown``."""
        self._serving = True
        try:
            while not self._stop.is_set():
                for key, events in self._sel.select(timeout=poll_interval):
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        self._take_back()
                    elif events & selectors.EVENT_READ:
                        self._read(key.data)
                    else:
                        self._write(key.data)
                self._expire(time.monotonic())
        finally:
            self._stopped.set()

    def _accept(self) -> None:
        for _ in range(64):  # a burst of connections, without starving the ones open
            try:
                sock, addr = self.socket.accept()
            except OSError:  # none waiting, out of descriptors, a connection reset in the queue: at the next event
                return
            sock.setblocking(False)
            conn = _Conn(sock, str(addr[0]), time.monotonic() + HEAD_DEADLINE_S)
            if not self.admission.admit(conn, conn.address, functools.partial(self._close, conn)):
                sock.close()
                continue
            self._conns.add(conn)
            self._by_deadline.append(conn)
            self._read(conn)  # a scraper's request mostly comes with its connection: often answered from here

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(MAX_REQUEST_BYTES)
        except (BlockingIOError, InterruptedError):
            self._watch(conn)
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        conn.parser.receive_data(data)
        try:
            event = conn.parser.next_event()
        except h11.RemoteProtocolError:
            self._send(conn, BAD_REQUEST)
            return
        if event is h11.NEED_DATA:
            self._watch(conn)
            return
        if not isinstance(event, h11.Request):
            self._close(conn)
            return
        self.admission.started(conn)
        headers = {k: v.decode("latin-1") for k, v in event.headers}  # h11 gives lower-case names
        if self.check_host and not host_header_allowed(headers.get(b"host")):
            self._send(conn, REFUSED_HOST)
            return
        self._send(conn, self.answers.answer(event.method.decode("ascii", "replace"), event.target.decode("latin-1"),
                                             headers.get(b"accept"), headers.get(b"accept-encoding")))

    def _watch(self, conn: _Conn) -> None:
        """Wait for more of ``conn``'s request head."""
        if not conn.watched:
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            conn.watched = True

    def _send(self, conn: _Conn, data: bytes) -> None:
        """The answer to a worker: the connection is the worker's until it is closed or handed back."""
        self._conns.discard(conn)
        if conn.watched:
            self._sel.unregister(conn.sock)
            conn.watched = False
        self._work.put((conn, data))

    def _deliver(self) -> None:
        """A worker: send an answer as far as the client takes it at once, then close, or hand the rest back."""
        while (item := self._work.get()) is not None:
            conn, data = item
            try:
                sent = conn.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = len(data)  # the client is gone: nothing more to send
            if sent >= len(data):
                conn.sock.close()
                self.admission.release(conn)
                continue
            self._back.append((conn, memoryview(data)[sent:]))
            try:
                self._wake_w.send(b"w")
            except OSError:  # the loop's wake-up is full (it will look) or closed (shutting down)
                pass

    def _take_back(self) -> None:
        """The answers the workers could not finish at once: written as their clients take them."""
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        while self._back:
            conn, rest = self._back.popleft()
            conn.out, conn.deadline = rest, time.monotonic() + SEND_TIMEOUT_S
            self._conns.add(conn)
            self._sending.append(conn)
            self._sel.register(conn.sock, selectors.EVENT_WRITE, conn)
            conn.watched = True

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            conn.out = None
            self._close(conn)

    def _expire(self, now: float) -> None:
        """Close the connections past their deadline: no whole head in time, or an answer not taken in time."""
        for line in (self._by_deadline, self._sending):
            while line:
                conn = line[0]
                if conn not in self._conns or (line is self._by_deadline and conn.out is not None):
                    line.popleft()  # closed, or past its head: its answer's deadline is the other line's
                    continue
                if conn.deadline > now:
                    break
                line.popleft()
                self._close(conn)

    def _close(self, conn: _Conn) -> None:
        if conn not in self._conns:
            return
        self._conns.discard(conn)
        self.admission.release(conn)
        if conn.watched:
            self._sel.unregister(conn.sock)
            conn.watched = False
        conn.sock.close()

    # -- lifecycle

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (it ends within its poll interval)."""
        self._stop.set()
        if self._serving:
            self._stopped.wait(5)

    def server_close(self) -> None:
        """Close the listening socket and every connection."""
        for _ in self._workers:
            self._work.put(None)
        for t in self._workers:
            t.join(2)
        for conn in list(self._conns):
            self._close(conn)
        self._sel.close()
        self.socket.close()
        self._wake_r.close()
        self._wake_w.close()
