"""The measuring pass-through proxy: forwards every request unchanged and relays the response bytes exactly as they
arrive (status line, headers, chunked framing and body untouched), while a ``Meter`` reads a copy of the body.

``GET /kvmon/stats`` on the proxy's own address answers the measurements (``kvmon.proxy.stats``) and is never
forwarded. One asyncio loop serves every client connection; each keeps its own upstream connection.

Longer than most modules because relaying one exchange is one piece of work: the request pump, the response relay
and the counters they update share the connection's state and the proxy's lock; the framing, the measuring, the
document and the upstream live in their own modules.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import socket
import ssl
import threading
import time
from typing import Any

from kvmon.proxy import stats
from kvmon.proxy.framing import (
    MAX_HEAD_BYTES,
    READ_SIZE,
    ChunkedDecoder,
    ClientGone,
    Head,
    ProtocolError,
    pipe_both,
    read_head,
    send_error,
    send_json,
    to_client,
)
from kvmon.proxy.meter import Meter, model_from_request
from kvmon.proxy.upstream import DEFAULT_UPSTREAM, Upstream, connect, probe_version

MAX_REQUEST_CAPTURE = 1024 * 1024  # request bytes kept to read "model" from
RECENT_MAX = 50
CONNECT_TIMEOUT_S = 5.0
VERSION_RETRY_S = 10.0
PROBE_TIMEOUT_S = 5.0


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
        """The measurements document served at ``/kvmon/stats`` (``kvmon.proxy.stats``)."""
        now_mono, now_unix = time.monotonic(), time.time()
        with self._lock:
            in_flight = [stats.in_flight_record(m, now_mono) for m in self._in_flight.values()]
            recent = list(self._recent)
            totals = dict(self._totals)
        return stats.document(upstream=self.upstream.url, upstream_kind=self.upstream_kind,
                              upstream_version=self.upstream_version, listen=self.url,
                              started_unix=self._started_unix, now_unix=now_unix, totals=totals,
                              in_flight=in_flight, recent=recent)

    def _begin(self, method: str, path: str) -> Meter:
        m = Meter(id=next(self._ids), method=method, path=path.split("?", 1)[0], started_unix=time.time(),
                  started_mono=time.monotonic())
        with self._lock:
            self._in_flight[m.id] = m
            self._totals["requests"] += 1
        return m

    def _end(self, m: Meter) -> None:
        m.finished_unix = time.time()
        record = stats.finished_record(m, self.upstream_kind, self._version_tuple) if m.generated else None
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
            found = await asyncio.wait_for(probe_version(self.upstream, self._ssl), PROBE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ProtocolError):
            found = None
        finally:
            self._probing = False
        if found is not None:
            self.upstream_kind, version, self._version_tuple = found
            if self._version_tuple is not None:
                self.upstream_version = version

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await connect(self.upstream, self._ssl)

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
                    await send_error(cwriter, 400, f"kvmon proxy: bad request ({e})")
                    return
                if head is None:
                    return
                parts = head.first_line.split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    await send_error(cwriter, 400, "kvmon proxy: bad request line")
                    return
                method, target, version = parts
                if method == "GET" and target.split("?", 1)[0] == stats.STATS_PATH:
                    await self._drain_body(creader, head)
                    keep = await send_json(cwriter, 200, self.stats(), close=head.has_token("connection", "close"))
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
                        await send_error(
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
                meter.model = model_from_request(bytes(captured))
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
                meter.aborted, meter.abort_reason = True, abort_reason(e)
            keep = False
        finally:
            if not body_task.done():
                body_task.cancel()
            with contextlib.suppress(BaseException):
                await body_task
            if meter.model is None and captured:
                meter.model = model_from_request(bytes(captured))
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
                    meter.aborted, meter.abort_reason = True, abort_reason(exc)
                    return False
                resp = await head_task
                if resp is None:
                    if sent == 0:
                        with self._lock:
                            self._totals["upstream_errors"] += 1
                        await send_error(cwriter, 502, f"kvmon proxy: upstream {self.upstream.url} closed the "
                                                        "connection without answering")
                        meter.aborted, meter.abort_reason = True, "upstream closed without answering"
                    return False
                status_parts = resp.first_line.split(" ", 2)
                try:
                    status = int(status_parts[1])
                except (IndexError, ValueError):
                    raise ProtocolError(f"bad status line {resp.first_line[:60]!r}") from None
                await to_client(cwriter, resp.raw)
                sent += len(resp.raw)
                if 100 <= status < 200 and status != 101:
                    continue  # interim (100 Continue, 103 Early Hints): the real answer follows
                break
            meter.set_response(status, resp.get("content-type"), resp.get("content-encoding"))
            if status == 101:  # protocol switch: plain two-way pipe from now on
                await body_task
                await pipe_both(creader, cwriter, ureader, uwriter)
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
                    await to_client(cwriter, data)  # relay first: measuring must not delay the client
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
                    await to_client(cwriter, data)
                    sent += len(data)
                    meter.feed(data, time.monotonic())
            else:  # body ends when the upstream closes
                keep = False
                while True:
                    data = await ureader.read(READ_SIZE)
                    if not data:
                        break
                    await to_client(cwriter, data)
                    sent += len(data)
                    meter.feed(data, time.monotonic())
            meter.finish_body(time.monotonic())
            if keep and not body_task.done():
                keep = False  # the upstream answered before reading the whole request
            return keep
        finally:
            with self._lock:
                self._totals["bytes_to_client"] += sent


def abort_reason(e: BaseException) -> str:
    """Why a relayed exchange ended early, in a few words."""
    if isinstance(e, ConnectionError) and "client" in str(e):
        return "client disconnected"
    if isinstance(e, ConnectionError):
        return f"upstream connection lost ({e})"
    if isinstance(e, asyncio.IncompleteReadError):
        return "connection closed mid-message"
    return f"{type(e).__name__}: {e}"[:160]
