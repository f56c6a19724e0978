"""An httpx transport for polls: one persistent stdlib connection per client, reused poll after poll, and one
deadline per request that covers the connection, the response head and the body.

A source asks the same server a few small GETs each second. httpx's default transport runs each through a
connection pool and the pure-Python h11 state machine; measured cold at 1 Hz, a request costs about 1.7 ms of
CPU that way and 1.2 ms through this transport (the standard library's ``http.client`` over the same kept-alive
socket, under the same httpx request and response objects). httpx's timeouts are per socket operation, so a server
that drips its head a byte at a time would hold a poll for ever; here every read waits at most until the request's
deadline (the ``kvmon_deadline`` extension, a ``time.monotonic()`` instant). HTTPS goes the same way, with the
certificate bundle httpx itself uses (certifi) and hostname checks.

Errors come out as httpx's exception types, so callers handle one family: refused or unresolvable hosts and
certificate failures as ``ConnectError``, each timeout as its httpx kind, a dropped or garbled answer as
``RemoteProtocolError`` or ``ReadError``. A request on a kept connection that the server has closed meanwhile (a
restart, an idle timeout) is sent once more on a new connection; a failure on a new connection is reported.
"""

from __future__ import annotations

import http.client
import io
import math
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from kvmon.sources.wire import tls_context

READ_CHUNK_BYTES = 64 * 1024
DEADLINE = "kvmon_deadline"  # request extension: the monotonic instant by which the whole answer must be in
# request extension for a stream (server-sent events): DEADLINE holds for the head only, then each read of the body
# waits at most this many seconds
STREAM_IDLE = "kvmon_stream_idle_s"
_DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class DeadlineReader(io.RawIOBase):
    """A socket as a raw stream whose every read waits at most until ``holder.deadline`` (a monotonic instant,
    read at each call, so one stream can serve request after request); past it a read raises TimeoutError."""

    def __init__(self, sock: socket.socket, holder: Any) -> None:
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # counted by the socket, which stays open while it is
        self._conn = holder

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._conn.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        idle = getattr(self._conn, "idle_s", None)
        if idle is not None:
            left = min(left, idle)
        self._sock.settimeout(None if math.isinf(left) else left)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _DeadlineSocket:
    """What ``http.client.HTTPResponse`` reads the answer from: the socket, behind a deadline."""

    def __init__(self, sock: socket.socket, conn: _DeadlineMixin) -> None:
        self._sock, self._conn = sock, conn

    def makefile(self, mode: str, *args: Any, **kw: Any) -> io.BufferedReader:
        return io.BufferedReader(DeadlineReader(self._sock, self._conn))


class _DeadlineMixin:
    """An ``http.client`` connection whose responses are read under ``deadline`` (set before each request)."""

    deadline: float = math.inf
    idle_s: float | None = None  # a stream's body: the longest one read may wait

    def response_class(self, sock: socket.socket, method: str | None = None, **kw: Any) -> http.client.HTTPResponse:
        return http.client.HTTPResponse(_DeadlineSocket(sock, self), method=method)  # type: ignore[arg-type]


class _Connection(_DeadlineMixin, http.client.HTTPConnection):
    pass


class _TlsConnection(_DeadlineMixin, http.client.HTTPSConnection):
    pass


class _Body(httpx.SyncByteStream):
    """The response body as it arrives; read errors become httpx errors and leave the connection closed."""

    def __init__(self, resp: http.client.HTTPResponse, transport: KeepAliveTransport) -> None:
        self._resp = resp
        self._transport = transport

    def __iter__(self) -> Iterator[bytes]:
        resp = self._resp
        try:
            while chunk := resp.read1(READ_CHUNK_BYTES):
                yield chunk
            if resp.length:  # the server closed the connection before the body's declared length
                raise http.client.IncompleteRead(b"", resp.length)
            resp.close()  # the whole body is read: the connection takes the next request
        except TimeoutError:
            self._transport.drop()
            raise httpx.ReadTimeout("timed out reading the response body") from None
        except http.client.IncompleteRead as e:
            self._transport.drop()
            raise httpx.RemoteProtocolError(f"connection closed with {e.expected} bytes of the body unsent") from None
        except (OSError, http.client.HTTPException) as e:
            self._transport.drop()
            raise httpx.ReadError(str(e) or type(e).__name__) from None

    def close(self) -> None:
        self._transport.body_closed(self)
        if not self._resp.isclosed():
            self._resp.close()  # an unread body cannot be skipped on a kept connection
            self._transport.drop()


class KeepAliveTransport(httpx.BaseTransport):
    """HTTP(S) requests over one kept-alive ``http.client`` connection (one request at a time), each under its
    deadline. ``tls``: the certificate checks for ``https://`` (default: ``tls_context()``)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        self._conn: _Connection | _TlsConnection | None = None
        self._origin: tuple[str, str, int] | None = None
        self._open_body: _Body | None = None  # the last response, until its body is closed
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None  # the last request's socket (abort() wakes a read blocked on it)

    def drop(self) -> None:
        """Close the connection; the next request opens a new one."""
        conn, self._conn, self._open_body = self._conn, None, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self.drop()

    def abort(self) -> None:
        """From another thread: end the request or stream now being read (its read fails at once)."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def body_closed(self, body: _Body) -> None:
        """The caller is done with a response: the connection can take the next request."""
        if self._open_body is body:
            self._open_body = None

    def _connect(self, scheme: str, host: str, port: int, connect_s: float | None,
                 deadline: float) -> _Connection | _TlsConnection:
        left = deadline - time.monotonic()
        if left <= 0:
            raise httpx.ConnectTimeout(f"no time left to connect to {host}:{port}")
        timeout: float | None = left if connect_s is None else min(connect_s, left)
        if timeout is not None and math.isinf(timeout):
            timeout = None
        conn: _Connection | _TlsConnection
        if scheme == "https":
            if self._tls is None:
                self._tls = tls_context()
            conn = _TlsConnection(host, port, timeout=timeout, context=self._tls)
        else:
            conn = _Connection(host, port, timeout=timeout)
        try:
            conn.connect()
        except TimeoutError:
            conn.close()
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} in time") from None
        except ssl.SSLError as e:  # a certificate that does not check out, a handshake that fails
            conn.close()
            raise httpx.ConnectError(f"TLS failed: {getattr(e, 'reason', None) or e}") from None
        except OSError as e:  # refused, unreachable, name not known
            conn.close()
            raise httpx.ConnectError(e.strerror or str(e) or type(e).__name__) from None
        self._conn, self._origin = conn, (scheme, host, port)
        return conn

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"this transport speaks HTTP and HTTPS only, not {url.scheme!r}")
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        deadline = float(request.extensions.get(DEADLINE, math.inf))
        if math.isinf(deadline) and timeouts.get("read") is not None:
            deadline = time.monotonic() + float(timeouts["read"])
        host, port = url.host, url.port or (443 if url.scheme == "https" else 80)
        headers = request.headers.raw
        body = request.read() or None
        with self._lock:
            if self._origin != (url.scheme, host, port) or self._open_body is not None:
                self.drop()  # another server, or the last response was left unread on this connection
            for attempt in (1, 2):
                kept = self._conn if self._conn is not None and self._conn.sock is not None else None
                reused = kept is not None
                conn = kept or self._connect(url.scheme, host, port, timeouts.get("connect"), deadline)
                sock = conn.sock
                if sock is None:  # pragma: no cover - connect() either sets it or raises
                    raise httpx.ConnectError(f"no connection to {host}:{port}")
                conn.deadline, conn.idle_s = deadline, None
                self._sock = sock
                left = deadline - time.monotonic()
                if left <= 0:
                    self.drop()
                    raise httpx.ReadTimeout("the request's deadline passed before it was sent")
                sock.settimeout(None if math.isinf(left) else left)
                try:
                    conn.putrequest(request.method, url.raw_path.decode("ascii"), skip_host=True,
                                    skip_accept_encoding=True)
                    for name, value in headers:
                        conn.putheader(name, value)
                    conn.endheaders(body)
                    resp = conn.getresponse()
                except _DROPPED as e:
                    self.drop()
                    if reused and attempt == 1:
                        continue  # the server closed the kept connection since the last request
                    raise httpx.RemoteProtocolError(f"server closed the connection ({type(e).__name__})") from None
                except TimeoutError:
                    self.drop()
                    raise httpx.ReadTimeout("timed out waiting for the response") from None
                except http.client.HTTPException as e:
                    self.drop()
                    raise httpx.RemoteProtocolError(f"malformed response ({type(e).__name__}: {e})") from None
                except OSError as e:
                    self.drop()
                    raise httpx.ReadError(e.strerror or str(e) or type(e).__name__) from None
                idle = request.extensions.get(STREAM_IDLE)
                if idle is not None:  # a stream: its head came in time; its body has no end, only a quiet limit
                    conn.deadline, conn.idle_s = math.inf, float(idle)
                if resp.will_close:
                    self._conn = None  # the response owns the socket now; it closes when read
                self._open_body = _Body(resp, self)
                return httpx.Response(resp.status, headers=resp.getheaders(), stream=self._open_body)
        raise AssertionError("unreachable")  # pragma: no cover
