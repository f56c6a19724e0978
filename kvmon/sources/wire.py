"""One kept HTTP/1.1 connection to one server, one request at a time, each under one deadline for the connection,
the answer's head and its body.

A poll asks the same server two or three small GETs a second, and each answer is a plain one: a status line, a few
headers, a ``Content-Length`` and the body. That answer is read here directly (split the head, find the length,
read the body): about a tenth of a millisecond of CPU a request at 1 Hz beside a busy server, where httpx over
``http.client`` took 0.6 and h11 alone 0.35. Anything else — chunked or close-delimited bodies, informational
answers, answers without a body, a head that does not read cleanly — goes to h11 with every byte received so far,
so the rules of HTTP/1.1 are h11's, and the tests hold both readers to one answer.

Failures are typed (``WireError`` subclasses) and say what happened in one line; the caller words them for people.
A request on a kept connection that the server closed meanwhile (a restart, its keep-alive limit) is sent once more
on a new connection; a failure on a new connection is reported.
"""

from __future__ import annotations

import math
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass

import h11

MAX_HEAD_BYTES = 64 * 1024
READ_BYTES = 64 * 1024
_STATUS = re.compile(rb"HTTP/1\.([01]) ([2-5][0-9][0-9])(?: [^\r\n]*)?")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DROPPED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class WireError(Exception):
    """A request that got no whole answer; ``str()`` is one line saying why."""


class ConnectFailed(WireError):
    """No connection: refused, unreachable, unknown name, or a TLS handshake or certificate that failed."""


class ConnectTimedOut(ConnectFailed):
    """No connection by the deadline."""


class TimedOut(WireError):
    """The answer (its head or its body) was not all in by the deadline."""


class Dropped(WireError):
    """The server closed the connection before the whole answer was in."""


class Garbled(WireError):
    """What came back is not an HTTP answer kvmon can read."""


class TooLarge(WireError):
    """The body is larger than the caller's cap (it is not read)."""

    def __init__(self, cap_bytes: int) -> None:
        super().__init__(f"body larger than {cap_bytes} bytes")
        self.cap_bytes = cap_bytes


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case; a repeated header's last value
    body: bytes


class _Head:
    """The answer's head as the fast path reads it, or None from ``read`` when it is not a plain one."""

    __slots__ = ("close", "headers", "length", "status")

    def __init__(self, status: int, headers: dict[str, str], length: int, close: bool) -> None:
        self.status, self.headers, self.length, self.close = status, headers, length, close

    @staticmethod
    def read(head: bytes) -> _Head | None:
        lines = head.split(b"\r\n")
        m = _STATUS.fullmatch(lines[0])
        if m is None:
            return None
        minor, status = m.group(1), int(m.group(2))
        if status in (204, 304):
            return None  # no body whatever the headers say: h11's rule
        headers: dict[str, str] = {}
        length: int | None = None
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not _TOKEN.fullmatch(name):
                return None  # a folded line, a space before the colon, no colon: h11 decides
            key = name.decode("ascii").lower()
            text = value.strip(b" \t").decode("latin-1")
            if key == "transfer-encoding":
                return None
            if key == "content-length":
                if not text.isdigit() or (length is not None and int(text) != length):
                    return None
                length = int(text)
            headers[key] = text
        if length is None:
            return None  # a body that ends when the connection does
        conn = headers.get("connection", "").lower()
        close = "close" in conn or (minor == b"0" and "keep-alive" not in conn)
        return _Head(status, headers, length, close)


class Wire:
    """Requests to one origin over one kept connection (``http`` or ``https``), each under a deadline."""

    def __init__(self, scheme: str, host: str, port: int, *, tls: ssl.SSLContext | None = None,
                 headers: dict[str, str] | None = None) -> None:
        if scheme not in ("http", "https"):
            raise ValueError(f"HTTP and HTTPS only, not {scheme!r}")
        self.scheme, self.host, self.port = scheme, host, port
        self._tls = tls
        default = 443 if scheme == "https" else 80
        netloc = f"[{host}]" if ":" in host else host
        self._host_header = netloc if port == default else f"{netloc}:{port}"
        self._headers = [("Host", self._host_header), *((headers or {}).items())]
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in self._headers).encode("latin-1")
        self._requests: dict[tuple[str, str], bytes] = {}  # the bytes of a bodiless request, made once per target
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    # --- the connection --------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection; the next request opens a new one."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _connect(self, deadline: float, connect_s: float | None) -> socket.socket:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConnectTimedOut(f"no time left to connect to {self._host_header}")
        timeout = left if connect_s is None else min(connect_s, left)
        try:
            sock = socket.create_connection((self.host, self.port), timeout=None if math.isinf(timeout) else timeout)
        except TimeoutError:
            raise ConnectTimedOut(f"no connection to {self._host_header} in time") from None
        except OSError as e:  # refused, unreachable, name not known
            raise ConnectFailed(e.strerror or str(e) or type(e).__name__) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.scheme == "https":
            if self._tls is None:
                self._tls = tls_context()
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            except TimeoutError:
                sock.close()
                raise ConnectTimedOut(f"no TLS handshake with {self._host_header} in time") from None
            except ssl.SSLError as e:  # a certificate that does not check out, a handshake that fails
                sock.close()
                raise ConnectFailed(f"TLS failed: {getattr(e, 'reason', None) or e}") from None
            except OSError as e:
                sock.close()
                raise ConnectFailed(e.strerror or str(e) or type(e).__name__) from None
        return sock

    # --- a request -------------------------------------------------------------------------------
    def _bytes(self, method: str, target: str, body: bytes | None, extra: dict[str, str] | None) -> bytes:
        if body is None and not extra:
            key = (method, target)
            cached = self._requests.get(key)
            if cached is None:
                cached = f"{method} {target} HTTP/1.1\r\n".encode("ascii") + self._fixed + b"\r\n"
                if len(self._requests) < 64:
                    self._requests[key] = cached
            return cached
        head = f"{method} {target} HTTP/1.1\r\n".encode("ascii") + self._fixed
        for k, v in (extra or {}).items():
            head += f"{k}: {v}\r\n".encode("latin-1")
        if body is not None:
            head += f"Content-Length: {len(body)}\r\n".encode("ascii")
        return head + b"\r\n" + (body or b"")

    def request(self, method: str, target: str, *, deadline: float, body: bytes | None = None,
                headers: dict[str, str] | None = None, connect_s: float | None = None,
                max_body_bytes: int = 8 * 1024 * 1024) -> Answer:
        """Send one request and read its whole answer by ``deadline`` (a ``time.monotonic()`` instant)."""
        data = self._bytes(method, target, body, headers)
        with self._lock:
            for attempt in (1, 2):
                reused = self._sock is not None
                sock = self._sock if reused else self._connect(deadline, connect_s)
                assert sock is not None
                self._sock = sock
                try:
                    return self._exchange(sock, method, target, data, body, headers, deadline, max_body_bytes)
                except _Retry:
                    self.close()
                    if reused and attempt == 1:
                        continue  # the server closed the kept connection since the last request
                    raise Dropped("the server closed the connection before answering") from None
                except WireError:
                    self.close()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _recv(self, sock: socket.socket, deadline: float) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimedOut("the answer was not in by the deadline")
        sock.settimeout(None if math.isinf(left) else left)
        try:
            return sock.recv(READ_BYTES)
        except TimeoutError:
            raise TimedOut("the answer was not in by the deadline") from None
        except ssl.SSLError as e:
            raise Dropped(f"TLS error ({getattr(e, 'reason', None) or e})") from None
        except OSError as e:
            raise Dropped(e.strerror or str(e) or type(e).__name__) from None

    def _exchange(self, sock: socket.socket, method: str, target: str, data: bytes, body: bytes | None,
                  headers: dict[str, str] | None, deadline: float, cap: int) -> Answer:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimedOut("the deadline passed before the request was sent")
        sock.settimeout(None if math.isinf(left) else left)
        try:
            sock.sendall(data)
        except TimeoutError:
            raise TimedOut("the request could not be sent by the deadline") from None
        except _DROPPED:
            raise _Retry() from None
        except OSError as e:
            raise Dropped(e.strerror or str(e) or type(e).__name__) from None
        buf = b""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buf) > MAX_HEAD_BYTES:
                raise Garbled(f"an answer head over {MAX_HEAD_BYTES // 1024} KiB")
            try:
                chunk = self._recv(sock, deadline)
            except Dropped:
                if not buf:
                    raise _Retry() from None
                raise
            if not chunk:
                if not buf:
                    raise _Retry()
                return self._slow(sock, method, target, body, headers, buf, deadline, cap, eof=True)
            buf += chunk
        head = _Head.read(buf[:end]) if method != "HEAD" else None
        if head is None:
            return self._slow(sock, method, target, body, headers, buf, deadline, cap)
        rest = buf[end + 4:]
        parts = [rest]
        got = len(rest)
        while got < head.length:  # a length over the cap is refused when that much came, not when it is declared:
            if got > cap:  # a body that trickles past the deadline is a timeout, as it would be at any length
                raise TooLarge(cap)
            chunk = self._recv(sock, deadline)
            if not chunk:
                raise Dropped(f"the connection closed with {head.length - got} bytes of the body unsent")
            parts.append(chunk)
            got += len(chunk)
        if head.length > cap:
            raise TooLarge(cap)
        if got > head.length or head.close:
            self.close()  # more than the answer said (the connection's next bytes are not ours), or the end
        return Answer(head.status, head.headers, b"".join(parts)[:head.length])

    def _slow(self, sock: socket.socket, method: str, target: str, body: bytes | None,
              headers: dict[str, str] | None, received: bytes, deadline: float, cap: int, eof: bool = False
              ) -> Answer:
        """Read the rest of the answer with h11, from the bytes already received on."""
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        req_headers = [*self._headers, *((headers or {}).items())]
        if body is not None:
            req_headers.append(("Content-Length", str(len(body))))
        try:
            conn.send(h11.Request(method=method, target=target, headers=req_headers))
            if body:
                conn.send(h11.Data(data=body))
            conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError as e:
            raise Garbled(f"the request cannot be sent as HTTP/1.1 ({e})") from None
        conn.receive_data(received)
        if eof:
            conn.receive_data(b"")
        status, answer_headers, parts, size = 0, {}, [], 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as e:
                if eof and status:  # the head was read, then the connection closed in the body
                    raise Dropped(f"the connection closed before the whole answer was in ({e})") from None
                raise Garbled(f"not an HTTP answer ({e})") from None
            if event is h11.NEED_DATA:
                chunk = self._recv(sock, deadline)
                eof = not chunk
                conn.receive_data(chunk)
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                answer_headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > cap:
                    raise TooLarge(cap)
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise Dropped("the connection closed before the whole answer was in")
        if not (conn.our_state is h11.DONE and conn.their_state is h11.DONE):
            self.close()  # the connection ends with this answer
        return Answer(status, answer_headers, b"".join(parts))


class _Retry(Exception):
    """The kept connection was closed before any of the answer came (the request may be sent again)."""


def tls_context() -> ssl.SSLContext:
    """Certificate checks as httpx makes them: certifi's bundle (the system's where certifi is missing)."""
    try:
        import certifi
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())
