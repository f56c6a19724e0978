"""``kvmon proxy``: a pass-through HTTP proxy in front of Ollama or llama-server that measures generation.

Ollama publishes no running counters, so the live rate can only be seen in the responses. The proxy
forwards every request unchanged and relays the response bytes exactly as they arrive (status line,
headers, chunked framing and body untouched), while a side reader decodes a copy of the body: Ollama's
NDJSON (final ``eval_count``/``eval_duration``/``prompt_eval_*``, nanoseconds), llama-server's SSE
``timings`` and OpenAI ``usage``, counting streamed chunks (about one token each) for the in-flight rate.

Measurements are served as JSON at ``GET /kvmon/stats`` on the proxy's own address (never forwarded):

``{"kvmon_proxy": 1, "upstream", "upstream_kind", "upstream_version", "listen", "started_unix", "now_unix",
"totals": {...}, "in_flight": [{"id", "method", "path", "model", "started_unix", "age_s", "chunks",
"tokens_so_far", "first_token_after_s", "decode_tok_s"}], "recent": [{"id", "method", "path", "model",
"status", "format", "started_unix", "finished_unix", "aborted", "abort_reason", "chunks", "stats_source",
"prompt_tokens", "cached_tokens", "prompt_seconds", "prompt_tok_s", "prompt_tok_s_reason",
"predicted_tokens", "predicted_seconds", "decode_tok_s", "decode_tok_s_source", "context_tokens"}]}``.

Prefill on Ollama >= 0.30: ``prompt_eval_count`` includes prompt tokens served from the cache, but
``prompt_eval_duration`` only covers those actually computed, so their ratio overstates prefill speed
(by 100x and more on a long cached conversation). The proxy asks the upstream ``/api/version``; on such
an Ollama (or while the version is unknown) it reports ``prompt_tok_s: null`` with the reason, and uses
the count only for the context depth (prompt + generated tokens), which it does describe correctly.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

DEFAULT_LISTEN = "127.0.0.1:11435"
DEFAULT_UPSTREAM = "http://127.0.0.1:11434"
STATS_PATH = "/kvmon/stats"
READ_SIZE = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024
MAX_LINE_BYTES = 1024 * 1024  # a longer NDJSON/SSE line is relayed but not parsed
MAX_JSON_BODY_BYTES = 8 * 1024 * 1024  # non-streamed JSON bodies parsed for stats up to this size
MAX_REQUEST_CAPTURE = 1024 * 1024  # request bytes kept to read "model" from
RECENT_MAX = 50
CONNECT_TIMEOUT_S = 5.0
VERSION_RETRY_S = 10.0
CACHED_PROMPT_REASON = (
    "Ollama >= 0.30 counts cached prompt tokens in prompt_eval_count but not in prompt_eval_duration: "
    "prefill rate withheld (it would be overstated)"
)
UNKNOWN_VERSION_REASON = (
    "upstream Ollama version unknown: prompt_eval_count may include cached tokens, prefill rate withheld"
)


class ProtocolError(Exception):
    """The peer sent something that is not HTTP/1.x."""


class ClientGone(Exception):
    """The client closed its connection while the proxy was answering."""


async def _to_client(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write to the client at once; a closed client raises ClientGone."""
    try:
        writer.write(data)
        await writer.drain()
    except (ConnectionError, OSError) as e:
        raise ClientGone(str(e) or type(e).__name__) from None
    if writer.is_closing():
        raise ClientGone("connection closed")


# ------------------------------------------------------------------------------------------------ HTTP bits


@dataclass
class Head:
    """A parsed request or response head; ``raw`` is forwarded byte for byte."""

    raw: bytes
    first_line: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def has_token(self, name: str, token: str) -> bool:
        value = ",".join(v for k, v in self.headers if k.lower() == name.lower())
        return token.lower() in (t.strip().lower() for t in value.split(","))


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """Read one HTTP head (up to the blank line); None on a clean EOF before any byte."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise ProtocolError("connection closed inside an HTTP head") from None
    except asyncio.LimitOverrunError:
        raise ProtocolError(f"HTTP head larger than {MAX_HEAD_BYTES} bytes") from None
    text = raw.decode("latin-1")
    lines = text.split("\r\n")
    while lines and lines[0] == "":  # tolerate stray CRLF between messages
        lines.pop(0)
    if not lines:
        raise ProtocolError("empty HTTP head")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ProtocolError(f"bad header line {line[:60]!r}")
        headers.append((name.strip(), value.strip()))
    return Head(raw=raw, first_line=lines[0], headers=headers)


class ChunkedDecoder:
    """Incremental decoder of ``Transfer-Encoding: chunked``: tells the payload and where the message ends.

    The proxy forwards the raw bytes itself; this only follows along.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._remaining = 0
        self._state = "size"  # size | data | data_crlf | trailer | done
        self.done = False
        self.extra = b""  # bytes after the end of the message

    def feed(self, data: bytes) -> bytes:
        """Consume raw bytes; return the payload they carry. Raises ProtocolError on bad framing."""
        out = bytearray()
        buf = self._buf + data
        self._buf = b""
        i = 0
        while i < len(buf) and not self.done:
            if self._state == "data":
                take = min(self._remaining, len(buf) - i)
                out += buf[i : i + take]
                i += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = "data_crlf"
                continue
            if self._state == "data_crlf":
                if len(buf) - i < 2:
                    self._buf = buf[i:]
                    if self._buf != b"\r"[: len(self._buf)]:
                        raise ProtocolError("missing CRLF after chunk data")
                    return bytes(out)
                if buf[i : i + 2] != b"\r\n":
                    raise ProtocolError("missing CRLF after chunk data")
                i += 2
                self._state = "size"
                continue
            j = buf.find(b"\r\n", i)
            if j < 0:
                self._buf = buf[i:]
                if len(self._buf) > 4096:
                    raise ProtocolError("chunk size line too long")
                return bytes(out)
            line = buf[i:j]
            i = j + 2
            if self._state == "size":
                size_text = line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {size_text[:20]!r}") from None
                if size < 0:
                    raise ProtocolError("negative chunk size")
                if size == 0:
                    self._state = "trailer"
                else:
                    self._remaining, self._state = size, "data"
            elif self._state == "trailer":
                if not line:
                    self.done = True
                    self._state = "done"
        if self.done and i < len(buf):
            self.extra = buf[i:]
        return bytes(out)


# ------------------------------------------------------------------------------------------------ measuring


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if v == v and v >= 0 else None


def _int(v: Any) -> int | None:
    f = _num(v)
    return int(f) if f is not None and f == int(f) else None


def _content_of(obj: dict[str, Any]) -> bool:
    """Whether one streamed object carries generated text (≈ one token)."""
    msg = obj.get("message")
    if isinstance(msg, dict) and (msg.get("content") or msg.get("thinking") or msg.get("tool_calls")):
        return True
    if obj.get("response") or obj.get("thinking"):
        return True
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        c = choices[0]
        delta = c.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
        ):
            return True
        if isinstance(c.get("text"), str) and c["text"]:
            return True
    return isinstance(obj.get("content"), str) and bool(obj["content"])


@dataclass
class Meter:
    """What one proxied request showed: chunk times and the final statistics its body carried."""

    id: int
    method: str
    path: str
    started_unix: float
    started_mono: float
    model: str | None = None
    status: int | None = None
    format: str | None = None  # "ndjson" | "sse" | "json" | None
    chunks: int = 0  # content-bearing chunks (≈ tokens)
    first_token_mono: float | None = None
    last_token_mono: float | None = None
    unparsed_lines: int = 0
    stats_source: str | None = None  # "ollama" | "llama-server" | "openai_usage"
    final: dict[str, Any] = field(default_factory=dict)
    aborted: bool = False
    abort_reason: str | None = None
    finished_unix: float | None = None
    _line_buf: bytearray = field(default_factory=bytearray)
    _skip_line: bool = False
    _json_buf: bytearray = field(default_factory=bytearray)
    _json_overflow: bool = False

    # -- feeding

    def set_response(self, status: int, content_type: str | None, content_encoding: str | None) -> None:
        self.status = status
        ct = (content_type or "").split(";", 1)[0].strip().lower()
        if content_encoding and content_encoding.lower() not in ("identity", ""):
            self.format = None  # compressed: relayed, not read
        elif ct in ("application/x-ndjson", "application/jsonl", "application/ndjson"):
            self.format = "ndjson"
        elif ct == "text/event-stream":
            self.format = "sse"
        elif ct == "application/json" or ct.endswith("+json"):
            self.format = "json"
        else:
            self.format = None

    def feed(self, payload: bytes, now: float) -> None:
        """Read a piece of the (de-chunked) response body; never raises on bad content."""
        if not payload or self.format is None:
            return
        if self.format == "json":
            if not self._json_overflow:
                self._json_buf += payload
                if len(self._json_buf) > MAX_JSON_BODY_BYTES:
                    self._json_overflow, self._json_buf = True, bytearray()
            return
        start = 0
        while True:
            nl = payload.find(b"\n", start)
            if nl < 0:
                rest = payload[start:]
                if not self._skip_line:
                    self._line_buf += rest
                    if len(self._line_buf) > MAX_LINE_BYTES:
                        self._line_buf, self._skip_line = bytearray(), True
                        self.unparsed_lines += 1
                return
            piece = payload[start:nl]
            start = nl + 1
            if self._skip_line:
                self._skip_line = False
                continue
            if self._line_buf:
                self._line_buf += piece
                line = bytes(self._line_buf)
                self._line_buf = bytearray()
            else:
                line = piece
            self._line(line.rstrip(b"\r"), now)

    def finish_body(self, now: float) -> None:
        """The body ended: parse what is left (a last line without newline, a whole JSON body)."""
        if self.format == "json" and self._json_buf and not self._json_overflow:
            try:
                obj = json.loads(bytes(self._json_buf))
            except ValueError:
                self.unparsed_lines += 1
            else:
                if isinstance(obj, dict):
                    self._object(obj, now, streamed=False)
            self._json_buf = bytearray()
        elif self._line_buf and not self._skip_line:
            line = bytes(self._line_buf)
            self._line_buf = bytearray()
            self._line(line.rstrip(b"\r"), now)

    def _line(self, line: bytes, now: float) -> None:
        if not line.strip():
            return
        if self.format == "sse":
            if not line.startswith(b"data:"):
                return  # event:, id:, retry:, comments
            line = line[5:].strip()
            if line == b"[DONE]":
                return
        try:
            obj = json.loads(line)
        except ValueError:
            self.unparsed_lines += 1
            return
        if isinstance(obj, dict):
            self._object(obj, now, streamed=True)
        else:
            self.unparsed_lines += 1

    def _object(self, obj: dict[str, Any], now: float, *, streamed: bool) -> None:
        if self.model is None and isinstance(obj.get("model"), str):
            self.model = obj["model"]
        if streamed and _content_of(obj):
            self.chunks += 1
            if self.first_token_mono is None:
                self.first_token_mono = now
            self.last_token_mono = now
        if obj.get("done") is True and ("eval_count" in obj or "prompt_eval_count" in obj or "eval_duration" in obj):
            self.stats_source = "ollama"
            self.final = {k: obj.get(k) for k in ("prompt_eval_count", "prompt_eval_duration", "eval_count",
                                                   "eval_duration", "total_duration", "load_duration")}
        timings = obj.get("timings")
        if isinstance(timings, dict) and ("predicted_n" in timings or "prompt_n" in timings):
            self.stats_source = "llama-server"
            self.final = dict(timings)
        usage = obj.get("usage")
        if isinstance(usage, dict) and usage and self.stats_source != "llama-server":
            self.stats_source = "openai_usage"
            details = usage.get("prompt_tokens_details")
            self.final = {
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
                "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None,
            }

    # -- reporting

    def in_flight_rate(self) -> float | None:
        """Tokens per second between the first and the latest content chunk; None below two chunks."""
        if self.chunks < 2 or self.first_token_mono is None or self.last_token_mono is None:
            return None
        span = self.last_token_mono - self.first_token_mono
        return (self.chunks - 1) / span if span > 0 else None

    def live_view(self, now_mono: float, now_unix: float) -> dict[str, Any]:
        first = self.first_token_mono - self.started_mono if self.first_token_mono is not None else None
        return {
            "id": self.id,
            "method": self.method,
            "path": self.path,
            "model": self.model,
            "started_unix": self.started_unix,
            "age_s": round(now_mono - self.started_mono, 6),
            "chunks": self.chunks,
            "tokens_so_far": self.chunks,
            "first_token_after_s": first,
            "decode_tok_s": self.in_flight_rate(),
        }

    def summary(self, upstream_kind: str | None, upstream_version: tuple[int, ...] | None) -> dict[str, Any]:
        """The finished request's record in ``recent`` (see the module docstring)."""
        out: dict[str, Any] = {
            "id": self.id,
            "method": self.method,
            "path": self.path,
            "model": self.model,
            "status": self.status,
            "format": self.format,
            "started_unix": self.started_unix,
            "finished_unix": self.finished_unix,
            "aborted": self.aborted,
            "abort_reason": self.abort_reason,
            "chunks": self.chunks,
            "unparsed_lines": self.unparsed_lines,
            "stats_source": self.stats_source,
            "prompt_tokens": None,
            "cached_tokens": None,
            "prompt_seconds": None,
            "prompt_tok_s": None,
            "prompt_tok_s_reason": None,
            "predicted_tokens": None,
            "predicted_seconds": None,
            "decode_tok_s": None,
            "decode_tok_s_source": None,
            "context_tokens": None,
        }
        f = self.final
        if self.stats_source == "ollama":
            pc, pd = _int(f.get("prompt_eval_count")), _num(f.get("prompt_eval_duration"))
            ec, ed = _int(f.get("eval_count")), _num(f.get("eval_duration"))
            out.update(prompt_tokens=pc, predicted_tokens=ec)
            out["prompt_seconds"] = pd / 1e9 if pd is not None else None
            out["predicted_seconds"] = ed / 1e9 if ed is not None else None
            if ec and ed:
                out["decode_tok_s"], out["decode_tok_s_source"] = ec / (ed / 1e9), "server"
            counts_cache = None if upstream_version is None else upstream_version[:2] >= (0, 30)
            if counts_cache is False:
                if pc and pd:
                    out["prompt_tok_s"] = pc / (pd / 1e9)
            elif pc:
                out["prompt_tok_s_reason"] = CACHED_PROMPT_REASON if counts_cache else UNKNOWN_VERSION_REASON
            if counts_cache and pc is not None:
                out["context_tokens"] = pc + (ec or 0)
        elif self.stats_source == "llama-server":
            pn, pms = _int(f.get("prompt_n")), _num(f.get("prompt_ms"))
            dn, dms = _int(f.get("predicted_n")), _num(f.get("predicted_ms"))
            cn = _int(f.get("cache_n"))
            out.update(prompt_tokens=pn, cached_tokens=cn, predicted_tokens=dn)
            out["prompt_seconds"] = pms / 1000 if pms is not None else None
            out["predicted_seconds"] = dms / 1000 if dms is not None else None
            if pn and pms:
                out["prompt_tok_s"] = pn / (pms / 1000)
            if dn and dms:
                out["decode_tok_s"], out["decode_tok_s_source"] = dn / (dms / 1000), "server"
            if pn is not None and dn is not None:
                out["context_tokens"] = (cn or 0) + pn + dn
        elif self.stats_source == "openai_usage":
            pt, ct = _int(f.get("prompt_tokens")), _int(f.get("completion_tokens"))
            cached = _int(f.get("cached_tokens"))
            out.update(prompt_tokens=pt, cached_tokens=cached, predicted_tokens=ct)
            out["prompt_tok_s_reason"] = "OpenAI-style usage carries no timings"
            # usage prompt_tokens includes cached ones on llama-server and Ollama >= 0.30
            inclusive = cached is not None or upstream_kind == "other" or (
                upstream_version is not None and upstream_version[:2] >= (0, 30)
            )
            if pt is not None and ct is not None and inclusive:
                out["context_tokens"] = pt + ct
        if out["decode_tok_s"] is None and (rate := self.in_flight_rate()) is not None:
            out["decode_tok_s"], out["decode_tok_s_source"] = rate, "proxy_chunk_timing"
        return out

    @property
    def generated(self) -> bool:
        """Whether this request produced something worth listing in ``recent``."""
        return self.stats_source is not None or self.chunks > 0


# ------------------------------------------------------------------------------------------------ the proxy


def parse_listen(text: str) -> tuple[str, int]:
    """``"127.0.0.1:11435"``, ``":11435"``, ``"[::1]:11435"`` or ``"11435"`` → (host, port)."""
    t = text.strip()
    if t.isdigit():
        return "127.0.0.1", int(t)
    if t.startswith("["):
        host, _, rest = t[1:].partition("]")
        port_text = rest.lstrip(":")
    else:
        host, sep, port_text = t.rpartition(":")
        if not sep:
            raise ValueError(f"--listen {text!r}: expected HOST:PORT")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--listen {text!r}: bad port")
    return host or "127.0.0.1", int(port_text)


@dataclass(frozen=True)
class Upstream:
    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Upstream:
        raw = url.strip()
        if "://" not in raw:
            raw = "http://" + raw
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"--upstream {url!r}: use http:// or https://")
        if not parts.hostname:
            raise ValueError(f"--upstream {url!r}: no host")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"--upstream {url!r}: bad port") from None
        if parts.username or parts.password:
            raise ValueError("--upstream must not carry credentials (send them from the client)")
        return cls(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80),
                   parts.path.rstrip("/"))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"


class ProxyServer:
    """The measuring pass-through proxy; ``start()`` runs it on a background thread, ``serve()`` in a loop."""

    def __init__(self, upstream: str = DEFAULT_UPSTREAM, *, host: str = "127.0.0.1", port: int = 11435,
                 recent_max: int = RECENT_MAX, probe_version: bool = True) -> None:
        self.upstream = Upstream.parse(upstream)
        self.host = host
        self.port = port
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._in_flight: dict[int, Meter] = {}
        self._recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=recent_max)
        self._totals = collections.Counter[str]()
        self._started_unix = time.time()
        self._probe_version = probe_version
        self.upstream_kind: str | None = None  # "ollama" | "other" (llama-server, ...), from /api/version
        self.upstream_version: str | None = None
        self._version_tuple: tuple[int, ...] | None = None
        self._last_probe = -1e9
        self._probing = False
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ssl = ssl.create_default_context() if self.upstream.scheme == "https" else None
        self._conn_tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start_serving(self) -> None:
        """Bind and start accepting (in the running loop)."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._client, self.host, self.port, limit=MAX_HEAD_BYTES)
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        if self._probe_version:
            self._maybe_probe()

    async def serve(self) -> None:
        """Serve until cancelled."""
        await self.start_serving()
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    def start(self) -> str:
        """Run on a daemon thread with its own loop; returns the listen URL once bound."""
        ready = threading.Event()
        error: list[BaseException] = []

        def runner() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start_serving())
            except BaseException as e:  # handed to the caller
                error.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._thread = threading.Thread(target=runner, name="kvmon-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        if error:
            raise error[0]
        return self.url

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conn_tasks):
            t.cancel()
        if self._conn_tasks:
            await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def stop(self) -> None:
        """Stop a proxy started with ``start()``."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    # -- stats

    def stats(self) -> dict[str, Any]:
        """The measurements document served at ``/kvmon/stats``."""
        now_mono, now_unix = time.monotonic(), time.time()
        with self._lock:
            in_flight = [m.live_view(now_mono, now_unix) for m in self._in_flight.values()]
            recent = list(self._recent)
            totals = dict(self._totals)
        for k in ("requests", "generations", "aborted", "upstream_errors", "bytes_to_upstream", "bytes_to_client"):
            totals.setdefault(k, 0)
        return {
            "kvmon_proxy": 1,
            "upstream": self.upstream.url,
            "upstream_kind": self.upstream_kind,
            "upstream_version": self.upstream_version,
            "listen": self.url,
            "started_unix": self._started_unix,
            "now_unix": now_unix,
            "totals": totals,
            "in_flight": in_flight,
            "recent": recent,
        }

    def _begin(self, method: str, path: str) -> Meter:
        m = Meter(id=next(self._ids), method=method, path=path.split("?", 1)[0], started_unix=time.time(),
                  started_mono=time.monotonic())
        with self._lock:
            self._in_flight[m.id] = m
            self._totals["requests"] += 1
        return m

    def _end(self, m: Meter) -> None:
        m.finished_unix = time.time()
        record = m.summary(self.upstream_kind, self._version_tuple) if m.generated else None
        with self._lock:
            self._in_flight.pop(m.id, None)
            if m.aborted:
                self._totals["aborted"] += 1
            if record is not None:
                self._totals["generations"] += 1
                self._recent.append(record)

    # -- upstream version (for the cached-prompt rule)

    def _maybe_probe(self) -> None:
        if self._version_tuple is not None or self._probing or not self._probe_version:
            return
        if time.monotonic() - self._last_probe < VERSION_RETRY_S:
            return
        self._last_probe = time.monotonic()
        self._probing = True
        task = asyncio.get_running_loop().create_task(self._probe())
        self._conn_tasks.add(task)
        task.add_done_callback(self._conn_tasks.discard)

    async def _probe(self) -> None:
        try:
            await asyncio.wait_for(self._probe_once(), 5.0)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ProtocolError):
            pass
        finally:
            self._probing = False

    async def _probe_once(self) -> None:
        """Ask the upstream ``/api/version``: Ollama answers with its version, llama-server with 404."""
        reader, writer = await self._connect()
        try:
            host = f"[{self.upstream.host}]" if ":" in self.upstream.host else self.upstream.host
            writer.write(
                f"GET {self.upstream.prefix}/api/version HTTP/1.1\r\nHost: {host}:{self.upstream.port}\r\n"
                "User-Agent: kvmon-proxy\r\nAccept: application/json\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            head = await read_head(reader)
            if head is None:
                return
            te, cl = head.get("transfer-encoding"), head.get("content-length")
            if te and "chunked" in te.lower():
                dec, body = ChunkedDecoder(), b""
                while not dec.done and len(body) < 65536:
                    data = await reader.read(READ_SIZE)
                    if not data:
                        break
                    body += dec.feed(data)
            elif cl and cl.strip().isdigit():
                body = await reader.readexactly(min(int(cl), 65536))
            else:
                body = await reader.read(65536)
        finally:
            writer.close()
        parts = head.first_line.split(" ", 2)
        status_ok = len(parts) > 1 and parts[1] == "200"
        version = None
        if status_ok:
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                obj = json.loads(body)
                if isinstance(obj, dict) and isinstance(obj.get("version"), str):
                    version = obj["version"]
        from kvmon.sources.ollama import parse_version

        vt = parse_version(version)
        if vt is not None:
            self.upstream_kind, self.upstream_version, self._version_tuple = "ollama", version, vt
        else:
            self.upstream_kind = "other"

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            self.upstream.host, self.upstream.port, ssl=self._ssl, limit=MAX_HEAD_BYTES,
            server_hostname=self.upstream.host if self._ssl else None,
        )

    # -- one client connection

    async def _client(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conn_tasks.add(task)
            task.add_done_callback(self._conn_tasks.discard)
        sock = cwriter.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = await read_head(creader)
                except ProtocolError as e:
                    await _send_error(cwriter, 400, f"kvmon proxy: bad request ({e})")
                    return
                if head is None:
                    return
                parts = head.first_line.split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    await _send_error(cwriter, 400, "kvmon proxy: bad request line")
                    return
                method, target, version = parts
                if method == "GET" and target.split("?", 1)[0] == STATS_PATH:
                    await self._drain_body(creader, head)
                    keep = await _send_json(cwriter, 200, self.stats(), close=head.has_token("connection", "close"))
                    if not keep:
                        return
                    continue
                if self._probe_version:
                    self._maybe_probe()
                if upstream is None or upstream[1].is_closing() or upstream[0].at_eof():
                    if upstream is not None:  # the upstream closed the idle connection
                        upstream[1].close()
                    try:
                        upstream = await asyncio.wait_for(self._connect(), CONNECT_TIMEOUT_S)
                    except (OSError, asyncio.TimeoutError) as e:
                        with self._lock:
                            self._totals["upstream_errors"] += 1
                        reason = str(e) or type(e).__name__
                        await _send_error(
                            cwriter, 502, f"kvmon proxy: cannot reach upstream {self.upstream.url} ({reason})"
                        )
                        return
                    usock = upstream[1].get_extra_info("socket")
                    if usock is not None:
                        with contextlib.suppress(OSError):
                            usock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                keep = await self._exchange(head, method, target, version, creader, cwriter, upstream)
                if not keep:
                    return
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:  # shutting down: end this connection quietly
            return
        finally:
            if upstream is not None:
                upstream[1].close()
            cwriter.close()

    async def _drain_body(self, reader: asyncio.StreamReader, head: Head) -> None:
        length = head.get("content-length")
        if length and length.isdigit():
            await reader.readexactly(int(length))

    async def _exchange(
        self,
        head: Head,
        method: str,
        target: str,
        version: str,
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> bool:
        """Forward one request and relay its response; True if both connections may be reused."""
        uwriter = upstream[1]
        meter = self._begin(method, target)
        raw_head = head.raw
        if self.upstream.prefix:
            raw_head = raw_head.replace(f" {target} ".encode("latin-1"),
                                        f" {self.upstream.prefix}{target} ".encode("latin-1"), 1)
        captured = bytearray()

        async def pump_request() -> None:
            uwriter.write(raw_head)
            sent = len(raw_head)
            te = head.get("transfer-encoding")
            if te and "chunked" in te.lower():
                dec = ChunkedDecoder()
                while not dec.done:
                    data = await creader.read(READ_SIZE)
                    if not data:
                        raise ConnectionResetError("client closed inside the request body")
                    payload = dec.feed(data)
                    if dec.extra:
                        raise ProtocolError("pipelined request after a chunked body")
                    uwriter.write(data)
                    sent += len(data)
                    if len(captured) < MAX_REQUEST_CAPTURE:
                        captured.extend(payload[: MAX_REQUEST_CAPTURE - len(captured)])
                    await uwriter.drain()
            else:
                length_text = head.get("content-length")
                remaining = int(length_text) if length_text and length_text.strip().isdigit() else 0
                while remaining > 0:
                    data = await creader.read(min(READ_SIZE, remaining))
                    if not data:
                        raise ConnectionResetError("client closed inside the request body")
                    remaining -= len(data)
                    uwriter.write(data)
                    sent += len(data)
                    if len(captured) < MAX_REQUEST_CAPTURE:
                        captured.extend(data[: MAX_REQUEST_CAPTURE - len(captured)])
                    await uwriter.drain()
            await uwriter.drain()
            if meter.model is None and captured:
                meter.model = _model_from_request(bytes(captured))
            with self._lock:
                self._totals["bytes_to_upstream"] += sent

        body_task = asyncio.ensure_future(pump_request())
        keep = False
        try:
            keep = await self._relay_response(meter, head, method, version, upstream, creader, cwriter, body_task)
        except ClientGone:
            meter.aborted, meter.abort_reason = True, "client disconnected"
            keep = False
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ProtocolError) as e:
            if not meter.aborted:
                meter.aborted, meter.abort_reason = True, _abort_reason(e)
            keep = False
        finally:
            if not body_task.done():
                body_task.cancel()
            with contextlib.suppress(BaseException):
                await body_task
            if meter.model is None and captured:
                meter.model = _model_from_request(bytes(captured))
            self._end(meter)
        return keep

    async def _relay_response(
        self,
        meter: Meter,
        req: Head,
        method: str,
        req_version: str,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        body_task: asyncio.Future[None],
    ) -> bool:
        ureader, uwriter = upstream
        sent = 0
        try:
            while True:
                head_task = asyncio.ensure_future(read_head(ureader))
                done, _ = await asyncio.wait({head_task, body_task}, return_when=asyncio.FIRST_COMPLETED)
                if body_task in done and head_task not in done and body_task.exception() is not None:
                    head_task.cancel()
                    exc = body_task.exception()
                    assert exc is not None
                    meter.aborted, meter.abort_reason = True, _abort_reason(exc)
                    return False
                resp = await head_task
                if resp is None:
                    if sent == 0:
                        with self._lock:
                            self._totals["upstream_errors"] += 1
                        await _send_error(cwriter, 502, f"kvmon proxy: upstream {self.upstream.url} closed the "
                                                        "connection without answering")
                        meter.aborted, meter.abort_reason = True, "upstream closed without answering"
                    return False
                status_parts = resp.first_line.split(" ", 2)
                try:
                    status = int(status_parts[1])
                except (IndexError, ValueError):
                    raise ProtocolError(f"bad status line {resp.first_line[:60]!r}") from None
                await _to_client(cwriter, resp.raw)
                sent += len(resp.raw)
                if 100 <= status < 200 and status != 101:
                    continue  # interim (100 Continue, 103 Early Hints): the real answer follows
                break
            meter.set_response(status, resp.get("content-type"), resp.get("content-encoding"))
            if status == 101:  # protocol switch: plain two-way pipe from now on
                await body_task
                await _pipe_both(creader, cwriter, ureader, uwriter)
                return False
            no_body = method == "HEAD" or status in (204, 304)
            te = resp.get("transfer-encoding")
            cl = resp.get("content-length")
            keep = not (
                resp.has_token("connection", "close")
                or req.has_token("connection", "close")
                or (req_version == "HTTP/1.0" and not req.has_token("connection", "keep-alive"))
                or resp.first_line.startswith("HTTP/1.0")
            )
            if no_body:
                pass
            elif te and "chunked" in te.lower():
                dec = ChunkedDecoder()
                framing_ok = True
                while not dec.done:
                    data = await ureader.read(READ_SIZE)
                    if not data:
                        meter.aborted, meter.abort_reason = True, "upstream closed mid-response"
                        return False
                    await _to_client(cwriter, data)  # relay first: measuring must not delay the client
                    sent += len(data)
                    if framing_ok:
                        try:
                            payload = dec.feed(data)
                        except ProtocolError:
                            framing_ok, keep = False, False  # relay until close; the client judges the bytes
                            meter.unparsed_lines += 1
                            continue
                        meter.feed(payload, time.monotonic())
                if dec.extra:
                    keep = False
            elif cl is not None and cl.strip().isdigit():
                remaining = int(cl)
                while remaining > 0:
                    data = await ureader.read(min(READ_SIZE, remaining))
                    if not data:
                        meter.aborted, meter.abort_reason = True, "upstream closed mid-response"
                        return False
                    remaining -= len(data)
                    await _to_client(cwriter, data)
                    sent += len(data)
                    meter.feed(data, time.monotonic())
            else:  # body ends when the upstream closes
                keep = False
                while True:
                    data = await ureader.read(READ_SIZE)
                    if not data:
                        break
                    await _to_client(cwriter, data)
                    sent += len(data)
                    meter.feed(data, time.monotonic())
            meter.finish_body(time.monotonic())
            if keep and not body_task.done():
                keep = False  # the upstream answered before reading the whole request
            return keep
        finally:
            with self._lock:
                self._totals["bytes_to_client"] += sent


async def _pipe_both(
    creader: asyncio.StreamReader,
    cwriter: asyncio.StreamWriter,
    ureader: asyncio.StreamReader,
    uwriter: asyncio.StreamWriter,
) -> None:
    """After 101 Switching Protocols: copy bytes both ways until either side closes."""

    async def copy(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await r.read(READ_SIZE):
                w.write(data)
                await w.drain()

    tasks = [asyncio.ensure_future(copy(creader, uwriter)), asyncio.ensure_future(copy(ureader, cwriter))]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:
        t.cancel()


def _abort_reason(e: BaseException) -> str:
    if isinstance(e, ConnectionError) and "client" in str(e):
        return "client disconnected"
    if isinstance(e, ConnectionError):
        return f"upstream connection lost ({e})"
    if isinstance(e, asyncio.IncompleteReadError):
        return "connection closed mid-message"
    return f"{type(e).__name__}: {e}"[:160]


def _model_from_request(body: bytes) -> str | None:
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("model"), str):
        return obj["model"]
    return None


async def _send_json(writer: asyncio.StreamWriter, status: int, obj: Any, *, close: bool) -> bool:
    body = json.dumps(obj, separators=(",", ":")).encode()
    reason = {200: "OK", 400: "Bad Request", 502: "Bad Gateway"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    return not close


async def _send_error(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    """An error the proxy itself makes, in Ollama's ``{"error": "..."}`` shape, then close."""
    with contextlib.suppress(ConnectionError, OSError):
        await _send_json(writer, status, {"error": message}, close=True)


# ------------------------------------------------------------------------------------------------ command


def run(args: argparse.Namespace, *, on_ready: Callable[[ProxyServer], None] | None = None) -> int:
    """``kvmon proxy --listen HOST:PORT --upstream URL``: serve until interrupted; 2 on bad arguments."""
    try:
        host, port = parse_listen(getattr(args, "listen", DEFAULT_LISTEN) or DEFAULT_LISTEN)
        server = ProxyServer(getattr(args, "upstream", DEFAULT_UPSTREAM) or DEFAULT_UPSTREAM, host=host, port=port)
    except ValueError as e:
        print(f"kvmon proxy: {e}", file=sys.stderr)
        return 2

    async def main() -> None:
        try:
            await server.start_serving()
        except OSError as e:
            raise SystemExit(f"kvmon proxy: cannot listen on {host}:{port} ({e.strerror or e})") from None
        print(f"kvmon proxy: {server.url} -> {server.upstream.url}; measurements at {server.url}{STATS_PATH}",
              flush=True)
        if host not in ("127.0.0.1", "localhost", "::1"):
            print(f"kvmon proxy: listening on {host}: other machines can reach your model server through it",
                  file=sys.stderr, flush=True)
        if on_ready is not None:
            on_ready(server)
        assert server._server is not None
        async with server._server:
            await server._server.serve_forever()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return 0
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            return 2
        raise
    return 0
