"""One small HTTP layer for every server source, on httpx: one kept connection per server, one deadline per poll,
capped bodies, typed failures.

Each request must be answered within the client's timeout and, while a poll runs (``kvmon.core.deadline``), by the
poll's deadline, which every request of the poll shares: a server that hangs costs the poll its timeout once, and
the requests left after it fail at once, saying which request the time went to. httpx's timeouts hold for each
read, so a server that drips its answer a byte at a time would never trip them: a timer (``Cutoff``) shuts the
connection's socket at the deadline, which ends the read blocked on it at once. An endpoint that hung (had its
whole time and no answer) is remembered (``HANGS``): from then on it is asked with a short limit, so the rest of
each reading goes on without it, and every so often with the whole time again, until it answers.

Every failure becomes a ``SourceError`` carrying a ``SourceFailure`` whose reason is one human line and never
contains the API key or URL credentials: a server's own error text is scrubbed (``kvmon.core.redact``) of the key
this client sends and of anything that looks like a credential, since a server may echo the request back.
JSON bodies are read by ``kvmon.core.jsonvals.parse_json``, the one rule for untrusted values.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import math
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from kvmon.core.deadline import current_deadline
from kvmon.core.jsonvals import InputError, parse_json
from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.core.redact import scrub

MAX_BODY_BYTES = 8 * 1024 * 1024  # /api/show verbose bodies are a few MB; nothing kvmon reads is larger
HANG_LIMIT_MIN_S = 0.25  # an endpoint that hung is asked with this limit (or a tenth of the timeout, if longer)
HANG_LIMIT_FRACTION = 0.1
HANG_RETRY_S = (5.0, 60.0)  # ... and with its whole time again after 5 s, doubling up to 60 s while it hangs
FAIR_SHARE = 0.5  # a request that timed out with at least this share of the timeout had its chance: it hung
KEEPALIVE_S = 30.0  # a kept connection idle longer is closed (polls come every few seconds at most)


@dataclass
class _Hang:
    retry_at: float  # when the endpoint gets its whole time again
    backoff_s: float


class HangMemory:
    """The endpoints (base URL, path) that hung in this process: the limit each is asked with until it answers."""

    def __init__(self) -> None:
        self._hangs: dict[tuple[str, str], _Hang] = {}
        self._lock = threading.Lock()

    def limit_s(self, key: tuple[str, str], timeout_s: float, now: float) -> float | None:
        """The short limit for an endpoint that hung (None: it gets its whole time, now or as it never hung)."""
        with self._lock:
            hang = self._hangs.get(key)
        if hang is None or now >= hang.retry_at:
            return None
        return min(timeout_s, max(HANG_LIMIT_MIN_S, HANG_LIMIT_FRACTION * timeout_s))

    def known(self, key: tuple[str, str]) -> bool:
        with self._lock:
            return key in self._hangs

    def hung(self, key: tuple[str, str], now: float) -> None:
        """The endpoint had its whole time and gave no answer."""
        with self._lock:
            old = self._hangs.get(key)
            backoff = HANG_RETRY_S[0] if old is None else min(HANG_RETRY_S[1], old.backoff_s * 2)
            self._hangs[key] = _Hang(now + backoff, backoff)
            if len(self._hangs) > 512:  # endpoints of servers long gone
                self._hangs.pop(next(iter(self._hangs)))

    def answered(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._hangs.pop(key, None)


HANGS = HangMemory()


def redact_url(url: str) -> str:
    """The URL without user:password and without query string (which may hold a token)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def normalize_base_url(url: str, default_port: int | None = None) -> str:
    """``localhost:8080`` → ``http://localhost:8080``; raises SourceError(BAD_URL) for nonsense."""
    raw = url.strip()
    if not raw:
        raise SourceError(SourceFailure(FailureKind.BAD_URL, "empty server URL"))
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as e:
        raise SourceError(SourceFailure(FailureKind.BAD_URL, f"bad server URL {redact_url(raw)!r}: {e}")) from None
    if parts.scheme not in ("http", "https"):
        raise SourceError(
            SourceFailure(FailureKind.BAD_URL, f"unsupported URL scheme {parts.scheme!r} (use http:// or https://)")
        )
    if not parts.hostname:
        raise SourceError(SourceFailure(FailureKind.BAD_URL, f"no host in server URL {redact_url(raw)!r}"))
    if port is None and default_port is not None and parts.scheme == "http":
        netloc = parts.netloc + f":{default_port}"
        raw = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    return raw.rstrip("/")


class Cutoff:
    """Calls ``cut`` at ``at`` (a ``time.monotonic()`` instant) unless ``end()`` comes first; ``end()`` says whether it
    was cut. Every cutoff of the process waits on one thread (``_Cutoffs``): a timer thread per request would make
    each request wait for its thread to start, which a busy process delays."""

    def __init__(self, at: float, cut: Callable[[], None]) -> None:
        self._cut = cut
        self._lock = threading.Lock()
        self._ended = self._was_cut = False
        if math.isfinite(at):
            _CUTOFFS.add(at, self)

    def fire(self) -> None:
        with self._lock:
            if not self._ended:
                self._was_cut = True
                self._cut()

    def end(self) -> bool:
        with self._lock:
            self._ended = True
            return self._was_cut


class _Cutoffs:
    """The one thread that fires each cutoff at its time, soonest first (an ended one is let go when its time comes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Cutoff]] = []
        self._order = itertools.count()  # ties in time go in order of arrival
        self._thread: threading.Thread | None = None

    def add(self, at: float, cutoff: Cutoff) -> None:
        with self._cond:
            heapq.heappush(self._heap, (at, next(self._order), cutoff))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kvmon-cutoffs", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is cutoff:  # sooner than the one the thread waits for
                self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    heapq.heappop(self._heap)[2].fire()
                self._cond.wait(self._heap[0][0] - now if self._heap else None)


_CUTOFFS = _Cutoffs()


class ConnectionSocket:
    """The socket of the connection an ``httpx.Client`` keeps, seen through httpx's ``trace`` request extension;
    ``cut()`` (from any thread) shuts it, so a read blocked on it ends at once and the connection is dropped."""

    _OPENED = ("connection.connect_tcp.complete", "connection.start_tls.complete")

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.opened = 0  # connections made so far

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event in self._OPENED:
            self.sock = info["return_value"].get_extra_info("socket")
            self.opened += event == self._OPENED[0]

    def cut(self) -> None:
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the TCP socket's own, under any TLS layer


@functools.cache
def _certifi_tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def default_tls(url: str) -> ssl.SSLContext:
    """The certificate checks for ``url``: httpx's own (certifi's bundle, loaded once) for ``https://``; for
    ``http://``, which never turns to TLS (no redirect is followed), a context with no certificates to load."""
    return _certifi_tls() if url.lower().startswith("https:") else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class _TooLarge(Exception):
    """The body grew past the client's cap (the rest is not read)."""


@dataclass(frozen=True)
class HttpResponse:
    status_code: int
    headers: dict[str, str]  # names in lower case
    body: bytes
    secrets: tuple[str, ...] = field(default=(), repr=False)  # what the request carried: never quoted back

    def scrubbed(self, text: str) -> str:
        """A text quoting this answer, without the request's secrets or anything credential-like."""
        return scrub(text, self.secrets)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class HttpClient:
    """Requests to one server over one kept connection (an ``httpx.Client``), one at a time; each call returns the
    whole (capped) body or raises SourceError. ``tls``: the certificate checks for ``https://`` (default: httpx's)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 3.0,
        max_body_bytes: int = MAX_BODY_BYTES,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.display_url = redact_url(self.base_url)
        self._api_key = api_key
        self._secrets = (api_key,) if api_key else ()
        self._max_body_bytes = max_body_bytes
        self._deadline_s = timeout_s
        self._connect_s = min(timeout_s, 2.0)
        headers: dict[str, str | bytes] = {"User-Agent": "kvmon",
                                           "Accept": "application/json, text/plain;q=0.9, */*;q=0.1"}
        if api_key:
            try:
                headers["Authorization"] = f"Bearer {api_key}".encode("latin-1")  # what an HTTP header can carry
            except UnicodeEncodeError:
                raise SourceError(SourceFailure(FailureKind.BAD_URL, "the API key cannot be sent: it has characters "
                                                "an HTTP header cannot carry (letters beyond Latin-1)")) from None
        self._root = redact_url(self.base_url).rstrip("/")  # credentials in the URL are never sent
        self._socket = ConnectionSocket()
        self._lock = threading.Lock()
        self._client = httpx.Client(
            headers=headers,  # type: ignore[arg-type]  # httpx takes str and bytes values in one mapping
            verify=tls if tls is not None else default_tls(self._root), trust_env=False,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=KEEPALIVE_S))

    def __repr__(self) -> str:  # never show the key
        return f"HttpClient({self.display_url!r}, api_key={'set' if self._api_key else 'none'})"

    def close(self) -> None:
        self._client.close()

    def hangs(self, path: str) -> bool:
        """Whether this endpoint hung and has not answered since (it is asked with a short limit)."""
        return HANGS.known((self.base_url, path.split("?", 1)[0]))

    def request(self, method: str, path: str, *, json_body: Any = None) -> HttpResponse:
        """Send one request; network trouble, oversize bodies and no answer by the deadline raise SourceError."""
        endpoint = path.split("?", 1)[0]
        start = time.monotonic()
        deadline = start + self._deadline_s
        poll = current_deadline()
        by_poll = poll is not None and poll.at < deadline
        if poll is not None and by_poll:
            deadline = poll.at
        hang_key = (self.base_url, endpoint)
        limit = HANGS.limit_s(hang_key, self._deadline_s, start)
        limited = limit is not None and start + limit < deadline
        if limit is not None and limited:
            deadline, by_poll = start + limit, False
        if deadline <= start:
            where = f"{self.display_url}{endpoint}"
            seconds = poll.seconds if poll is not None else self._deadline_s
            spent = poll.spent_on if poll is not None and poll.spent_on else "the requests before it"
            why = (f"{where} not asked again: it did not answer in time in this poll ({seconds:g} s)"
                   if spent == where else f"{where} not asked: this poll's {seconds:g} s went to waiting on {spent}")
            if poll is not None:
                poll.note_timeout(why)
            raise SourceError(SourceFailure(FailureKind.TIMEOUT, why, endpoint))
        url = self._root + ("" if path.startswith("/") else "/") + path
        with self._lock:
            cutoff = Cutoff(deadline, self._socket.cut)  # httpx's timeouts are per read: this one is for all
            try:
                status, headers, body = self._exchange(method, url, json_body, deadline)
            except httpx.TimeoutException:
                cutoff.end()
                self._timeout(endpoint, start, deadline, limit if limited else None, by_poll)
            except Exception as e:
                if cutoff.end() and not isinstance(e, _TooLarge):  # cut at the deadline
                    self._timeout(endpoint, start, deadline, limit if limited else None, by_poll)
                raise self._failure(e, endpoint) from None
            cutoff.end()
        HANGS.answered(hang_key)
        if poll is not None:
            poll.note_answer()
        return HttpResponse(status, headers, body, self._secrets)

    def _exchange(self, method: str, url: str, json_body: Any, deadline: float) -> tuple[int, dict[str, str], bytes]:
        """The answer's status, headers and whole body; a kept connection that the server closed meanwhile (a
        restart, its keep-alive limit) is asked once more on a new one."""
        for attempt in (1, 2):
            left = deadline - time.monotonic()
            if left <= 0:  # (a timeout of 0 would make the socket non-blocking: no wait at all, a strange error)
                raise httpx.ConnectTimeout("the deadline passed before the request was sent")
            opened = self._socket.opened
            try:
                resp = self._client.send(self._client.build_request(
                    method, url, json=json_body, timeout=httpx.Timeout(left, connect=min(self._connect_s, left)),
                    extensions={"trace": self._socket.trace}), stream=True)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                if attempt == 1 and self._socket.opened == opened and time.monotonic() < deadline:
                    continue  # nothing came on a kept connection
                raise
            try:
                parts, size = [], 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > self._max_body_bytes:
                        raise _TooLarge()
                    parts.append(chunk)
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in resp.headers.raw}
                return resp.status_code, headers, b"".join(parts)
            finally:
                resp.close()
        raise AssertionError("unreachable")  # pragma: no cover

    def _timeout(self, endpoint: str, start: float, deadline: float, limit: float | None, by_poll: bool) -> None:
        """Raise the TIMEOUT failure of a request that got no answer in time (and, when it had a fair chance,
        remember that it hung)."""
        where = f"{self.display_url}{endpoint}"
        poll = current_deadline()
        if limit is not None:
            why = (f"{where} did not answer in time (it hung before: asked with a {limit:g} s limit until it "
                   "answers again)")
        else:
            had = max(0.0, deadline - start)
            if had >= FAIR_SHARE * self._deadline_s:
                HANGS.hung((self.base_url, endpoint), time.monotonic())
            if by_poll and poll is not None and poll.spent_on is None:
                poll.spent_on = where
            why = f"{where} did not answer in time ({had:.1f} s)"
        if poll is not None:
            poll.note_timeout(why)
        raise SourceError(SourceFailure(FailureKind.TIMEOUT, why, endpoint)) from None

    def _failure(self, e: Exception, endpoint: str) -> SourceError:
        """What went wrong, for people: no connection, a connection closed mid-answer, a body too large, a request
        that cannot be sent."""
        if isinstance(e, _TooLarge):
            cap_mib = self._max_body_bytes // (1024 * 1024)
            return SourceError(SourceFailure(FailureKind.UNEXPECTED_BODY,
                                             f"{endpoint} body larger than {cap_mib} MiB; not read", endpoint))
        if isinstance(e, httpx.ConnectError):
            return SourceError(SourceFailure(FailureKind.UNREACHABLE,
                                             f"cannot connect to {self.display_url} ({_short(e)})", endpoint))
        if isinstance(e, httpx.DecodingError):
            return SourceError(SourceFailure(FailureKind.UNEXPECTED_BODY,
                                             f"{endpoint} body could not be decoded ({_short(e)})", endpoint))
        if isinstance(e, (httpx.UnsupportedProtocol, httpx.InvalidURL, httpx.LocalProtocolError, ValueError)):
            return SourceError(SourceFailure(  # a request (a model name, a path) that cannot be sent as it is
                FailureKind.BAD_URL, f"{endpoint}: the request cannot be sent ({_short(e)})", endpoint))
        if isinstance(e, httpx.TransportError):  # dropped mid-answer, or what came back is not HTTP
            return SourceError(SourceFailure(
                FailureKind.UNREACHABLE, f"{self.display_url}{endpoint} closed the connection ({_short(e)})", endpoint))
        raise e

    def get(self, path: str) -> HttpResponse:
        return self.request("GET", path)

    def get_json(self, path: str) -> Any:
        """GET and decode JSON, mapping HTTP errors to typed failures (401, 404, 501, 503, …)."""
        resp = self.get(path)
        raise_for_status(resp, path, self.display_url)
        return decode_json(resp, path)


def _short(e: BaseException) -> str:
    text = re.sub(r"^\[Errno -?\d+\] ", "", str(e).strip()) or type(e).__name__
    return text.splitlines()[0][:160]


def error_message(resp: HttpResponse) -> str | None:
    """The server's own error message from an OpenAI/llama-server style error body, if any: one line, at most
    200 characters, scrubbed of the request's key and of anything credential-like (servers echo requests)."""
    try:
        body = parse_json(resp.body)
    except InputError:
        return None
    msg: Any = None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            msg = err["message"]
        elif isinstance(err, str):
            msg = err
    if not msg:
        return None
    line = " ".join(str(msg).split())
    return resp.scrubbed(line[:200] + ("…" if len(line) > 200 else ""))


def raise_for_status(resp: HttpResponse, path: str, display_url: str) -> None:
    """Turn a non-2xx status into the typed failure a monitor should show."""
    code = resp.status_code
    if 200 <= code < 300:
        return
    endpoint = path.split("?", 1)[0]
    msg = error_message(resp)
    detail = f": {msg}" if msg else ""
    if code == 401 or code == 403:
        kind, reason = FailureKind.AUTH_REJECTED, f"API key rejected by {display_url} (HTTP {code}{detail})"
    elif code == 503 and msg and "loading" in msg.lower():
        kind, reason = FailureKind.MODEL_LOADING, f"{display_url} is loading the model"
    elif code == 503:
        kind, reason = FailureKind.SERVER_ERROR, f"{display_url}{endpoint} unavailable (HTTP 503{detail})"
    elif code == 501:
        kind, reason = FailureKind.ENDPOINT_DISABLED, f"{endpoint} is disabled on this server{detail}"
    elif code == 404:
        kind, reason = FailureKind.NOT_FOUND, f"{endpoint} not found on {display_url} (HTTP 404)"
    else:
        kind, reason = FailureKind.SERVER_ERROR, f"{display_url}{endpoint} answered HTTP {code}{detail}"
    raise SourceError(SourceFailure(kind, reason, endpoint, code))


def decode_json(resp: HttpResponse, path: str) -> Any:
    """Decode a JSON body or raise UNEXPECTED_BODY naming what came instead (HTML page, truncation, …)."""
    endpoint = path.split("?", 1)[0]
    try:
        return parse_json(resp.body)
    except InputError as e:
        head = resp.body[:60].decode("utf-8", errors="replace").strip().replace("\n", " ")
        what = "an HTML page" if head.lower().startswith(("<!doctype", "<html")) else resp.scrubbed(f"{head!r}")
        detail = "nested too deeply" if "nested" in str(e) else f"got {what}, {len(resp.body)} bytes"
        raise SourceError(
            SourceFailure(
                FailureKind.UNEXPECTED_BODY,
                f"{endpoint} did not return JSON ({detail})",
                endpoint,
                resp.status_code,
            )
        ) from None
