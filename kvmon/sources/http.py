"""One small HTTP layer for every server source: one deadline per poll, capped bodies, typed failures.

Each request must be answered within the client's timeout and, while a poll runs (``kvmon.core.deadline``), by the
poll's deadline, which every request of the poll shares: a server that hangs costs the poll its timeout once, and
the requests left after it fail at once, saying which request the time went to. An endpoint that hung (had its
whole time and no answer) is remembered (``HANGS``): from then on it is asked with a short limit, so the rest of
each reading goes on without it, and every so often with the whole time again, until it answers.

Every failure becomes a ``SourceError`` carrying a ``SourceFailure`` whose reason is one human line and never
contains the API key or URL credentials: a server's own error text is scrubbed (``kvmon.core.redact``) of the key
this client sends and of anything that looks like a credential, since a server may echo the request back.
JSON bodies are read by ``kvmon.core.jsonvals.parse_json``, the one rule for untrusted values.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kvmon.core.deadline import current_deadline
from kvmon.core.jsonvals import InputError, parse_json
from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.core.redact import scrub
from kvmon.sources.wire import ConnectFailed, ConnectTimedOut, TimedOut, TooLarge, Wire, WireError

MAX_BODY_BYTES = 8 * 1024 * 1024  # /api/show verbose bodies are a few MB; nothing kvmon reads is larger
HANG_LIMIT_MIN_S = 0.25  # an endpoint that hung is asked with this limit (or a tenth of the timeout, if longer)
HANG_LIMIT_FRACTION = 0.1
HANG_RETRY_S = (5.0, 60.0)  # ... and with its whole time again after 5 s, doubling up to 60 s while it hangs
FAIR_SHARE = 0.5  # a request that timed out with at least this share of the timeout had its chance: it hung


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


@dataclass(frozen=True)
class HttpResponse:
    status_code: int
    headers: dict[str, str]
    body: bytes
    secrets: tuple[str, ...] = field(default=(), repr=False)  # what the request carried: never quoted back

    def json(self) -> Any:
        """The body as JSON values (``parse_json``); raises InputError when it is not JSON."""
        return parse_json(self.body)

    def scrubbed(self, text: str) -> str:
        """A text quoting this answer, without the request's secrets or anything credential-like."""
        return scrub(text, self.secrets)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class HttpClient:
    """Requests to one server over one kept connection (``kvmon.sources.wire``); each call returns the whole
    (capped) body or raises SourceError. ``tls``: the certificate checks for ``https://`` (default: certifi's)."""

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
        headers = {"User-Agent": "kvmon", "Accept": "application/json, text/plain;q=0.9, */*;q=0.1"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        parts = urlsplit(self.base_url)
        try:
            port = parts.port
        except ValueError:
            port = None
        self._prefix = parts.path.rstrip("/")  # a server mounted under a path (a reverse proxy's /llm)
        scheme = parts.scheme or "http"
        self._wire = Wire(scheme, parts.hostname or "", port or (443 if scheme == "https" else 80), tls=tls,
                          headers=headers)

    def __repr__(self) -> str:  # never show the key
        return f"HttpClient({self.display_url!r}, api_key={'set' if self._api_key else 'none'})"

    def close(self) -> None:
        self._wire.close()

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
        target = self._prefix + ("" if path.startswith("/") else "/") + path
        body = extra = None
        if json_body is not None:
            body = json.dumps(json_body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            extra = {"Content-Type": "application/json"}
        try:
            got = self._wire.request(method, target, deadline=deadline, body=body, headers=extra,
                                     connect_s=self._connect_s, max_body_bytes=self._max_body_bytes)
        except (TimedOut, ConnectTimedOut):
            why = self._timed_out(endpoint, start, deadline, limit if limited else None, by_poll)
            if poll is not None:
                poll.note_timeout(why)
            raise SourceError(SourceFailure(FailureKind.TIMEOUT, why, endpoint)) from None
        except ConnectFailed as e:
            raise SourceError(SourceFailure(FailureKind.UNREACHABLE,
                                            f"cannot connect to {self.display_url} ({_short(e)})", endpoint)) from None
        except TooLarge:
            cap_mib = self._max_body_bytes // (1024 * 1024)
            raise SourceError(SourceFailure(FailureKind.UNEXPECTED_BODY,
                                            f"{endpoint} body larger than {cap_mib} MiB; not read", endpoint)) from None
        except WireError as e:  # dropped mid-answer, or what came back is not HTTP
            raise SourceError(SourceFailure(
                FailureKind.UNREACHABLE, f"{self.display_url}{endpoint} closed the connection ({_short(e)})",
                endpoint)) from None
        except (UnicodeEncodeError, ValueError):  # a request (a model name, a path) that is not valid text
            raise SourceError(
                SourceFailure(FailureKind.BAD_URL, f"{endpoint}: the request is not valid text", endpoint)
            ) from None
        HANGS.answered(hang_key)
        if poll is not None:
            poll.note_answer()
        return HttpResponse(got.status, got.headers, got.body, self._secrets)

    def _timed_out(self, endpoint: str, start: float, deadline: float, limit: float | None, by_poll: bool) -> str:
        """Why a request got no answer in time (and, when it had a fair chance, remember that it hung)."""
        where = f"{self.display_url}{endpoint}"
        if limit is not None:
            return (f"{where} did not answer in time (it hung before: asked with a {limit:g} s limit until it "
                    "answers again)")
        had = max(0.0, deadline - start)
        if had >= FAIR_SHARE * self._deadline_s:
            HANGS.hung((self.base_url, endpoint), time.monotonic())
        poll = current_deadline()
        if by_poll and poll is not None and poll.spent_on is None:
            poll.spent_on = where
        return f"{where} did not answer in time ({had:.1f} s)"

    def get(self, path: str) -> HttpResponse:
        return self.request("GET", path)

    def get_json(self, path: str) -> Any:
        """GET and decode JSON, mapping HTTP errors to typed failures (401, 404, 501, 503, …)."""
        resp = self.get(path)
        raise_for_status(resp, path, self.display_url)
        return decode_json(resp, path)


def _short(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:160]


def error_message(resp: HttpResponse) -> str | None:
    """The server's own error message from an OpenAI/llama-server style error body, if any: one line, at most
    200 characters, scrubbed of the request's key and of anything credential-like (servers echo requests)."""
    try:
        body = resp.json()
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
