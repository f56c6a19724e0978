"""The measuring pass-through proxy: forwards every request unchanged and relays the response bytes exactly as they
arrive (status line, headers, chunked framing and body untouched), while a ``Meter`` reads a copy of the body.

``GET /kvmon/stats`` on the proxy's own address answers the measurements (``kvmon.proxy.stats``) and is never
forwarded. One asyncio loop serves every client connection; each keeps its own upstream connection. Both
directions are read along by h11 (``kvmon.proxy.framing``): a request with ambiguous framing is answered 400 and
never forwarded, a head not finished in time 408, an upstream that fails before answering (refused, reset,
closed, a head that is no HTTP) 502 with the reason, and one that has not begun its answer ``upstream_timeout_s``
after the request went to it whole 504 with the reason; an answer that goes quiet that long in the middle is cut
off there (the bytes relayed stay as they were, and the client's connection is closed).

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11

from kvmon.core.locality import host_header_allowed, is_loopback_host
from kvmon.proxy import UPSTREAM_TIMEOUT_S, stats
from kvmon.proxy.framing import (
    MAX_HEAD_BYTES,
    ClientGone,
    Head,
    HeadTimeout,
    MessageReader,
    ProtocolError,
    Stalled,
    pipe_both,
    send_error,
    send_json,
    to_client,
)
from kvmon.proxy.listener import Listener
from kvmon.proxy.meter import Meter, model_from_request
from kvmon.proxy.prompts import PromptLog
from kvmon.proxy.upstream import DEFAULT_UPSTREAM, Upstream, connect, probe_version

MAX_REQUEST_CAPTURE = 1024 * 1024  # request bytes kept to read "model" from
RECENT_MAX = 50
CONNECT_TIMEOUT_S = 5.0
HEAD_TIMEOUT_S = 5.0  # a request head must be finished this long after the accept (the first) or its first byte
IDLE_TIMEOUT_S = 300.0  # a kept-alive client connection with no request for this long is closed
CLOSE_FLUSH_S = 60.0  # a closing connection's last bytes wait this long at most for the client to take them
VERSION_RETRY_S = 10.0
PROBE_TIMEOUT_S = 5.0
CLIENT_UNSENT_BYTES = 16 * 1024  # TCP_NOTSENT_LOWAT of a client connection, where the system has it


class ProxyServer:
    """The measuring pass-through proxy; ``start()`` runs it on a background thread, ``start_serving()`` in the running
    loop."""

    def __init__(self, upstream: str = DEFAULT_UPSTREAM, *, host: str = "127.0.0.1", port: int = 11435,
                 probe_version: bool = True, head_timeout_s: float = HEAD_TIMEOUT_S,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, upstream_timeout_s: float | None = UPSTREAM_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``upstream_timeout_s``: see ``kvmon.proxy.UPSTREAM_TIMEOUT_S`` (None or 0: wait as long as the upstream
        takes). ``clock``: what the measured times are read from (the demo's simulated clock: its replies are timed in
        the simulated seconds every other reading of the demo is stamped with)."""
        self.upstream = Upstream.parse(upstream)
        self._clock = clock
        self.head_timeout_s = head_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.upstream_timeout_s = upstream_timeout_s or None
        self.host = host
        self.port = port
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._in_flight: dict[int, Meter] = {}
        self._recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_MAX)
        self._totals = collections.Counter[str]()
        self._started_unix = time.time()
        self._probe_version = probe_version
        self.upstream_kind: str | None = None  # "ollama" | "other" (llama-server, ...), from /api/version
        self.upstream_version: str | None = None
        self._version_tuple: tuple[int, ...] | None = None
        self._last_probe = -1e9
        self._probing = False
        self._listener: Listener | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ssl = ssl.create_default_context() if self.upstream.scheme == "https" else None
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._prompts = PromptLog()  # consecutive prompts compared by keyed hashes (kvmon.proxy.prompts)
        self._check_host = False  # listening on loopback: a Host that names no loopback is refused

    # -- lifecycle

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start_serving(self) -> None:
        """Bind and start accepting (in the running loop); raises OSError when the address cannot be had."""
        self._loop = asyncio.get_running_loop()
        self._listener = Listener(self.host, self.port, self._accepted)
        self.port = self._listener.port
        self._check_host = is_loopback_host(self.host)
        self._accepting = self._loop.create_task(self._listener.serve())
        self._maybe_probe()

    def start(self) -> str:
        """Run on a daemon thread with its own loop; returns the listen URL once bound (raises what binding raised)."""
        loop = self._loop = asyncio.new_event_loop()

        def runner() -> None:
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.close())
                loop.close()

        self._thread = threading.Thread(target=runner, name="kvmon-proxy", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.start_serving(), loop).result(10)
        except BaseException:
            self.stop()
            raise
        return self.url

    async def close(self) -> None:
        """Stop accepting and end every connection (in the running loop)."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(BaseException):
                await self._accepting
        for t in list(self._conn_tasks):
            t.cancel()
        if self._conn_tasks:
            await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        if self._listener is not None:
            await self._listener.close()

    def stop(self) -> None:
        """Stop a proxy started with ``start()``."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    # -- stats

    def stats(self) -> dict[str, Any]:
        """The measurements document served at ``/kvmon/stats`` (``kvmon.proxy.stats``)."""
        now_mono, now_unix = self._clock(), time.time()
        with self._lock:
            in_flight = [stats.in_flight_record(m, now_mono) for m in self._in_flight.values()]
            recent = list(self._recent)
            totals = dict(self._totals)
        if self._listener is not None:
            totals.update(accept_failures=self._listener.accept_failures,
                          connections_refused=self._listener.admission.refused,
                          connections_closed_waiting=self._listener.admission.evicted)
        return stats.document(upstream=self.upstream.url, upstream_kind=self.upstream_kind,
                              upstream_version=self.upstream_version, listen=self.url,
                              started_unix=self._started_unix, now_unix=now_unix, totals=totals,
                              in_flight=in_flight, recent=recent, prompts=self._prompts.document())

    def _begin(self, method: str, path: str) -> Meter:
        m = Meter(id=next(self._ids), method=method, path=path.split("?", 1)[0], started_unix=time.time(),
                  started_mono=self._clock())
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
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ProtocolError, h11.ProtocolError):
            found = None
        finally:
            self._probing = False
        if found is not None:  # the version stays unknown but for an Ollama's
            self.upstream_kind, self.upstream_version, self._version_tuple = found

    # -- one client connection

    def _upstream_error(self) -> None:
        with self._lock:
            self._totals["upstream_errors"] += 1

    async def _accepted(self, sock: socket.socket, address: str, accepted_at: float) -> None:
        """One admitted client connection, from its accept on."""
        creader, cwriter = await asyncio.open_connection(sock=sock, limit=MAX_HEAD_BYTES)
        task = asyncio.current_task()
        if task is not None:
            self._conn_tasks.add(task)
            task.add_done_callback(self._conn_tasks.discard)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if hasattr(socket, "TCP_NOTSENT_LOWAT"):  # little held unsent: a reply goes as the client takes it
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, CLIENT_UNSENT_BYTES)
        client = MessageReader(creader)
        upstream: _Link | None = None
        assert self._listener is not None  # it called this
        admission = self._listener.admission
        loop = asyncio.get_running_loop()
        # the first request's head must be whole this long after the accept; a later one's, after its first byte
        within: float | None = max(0.0, accepted_at + self.head_timeout_s - loop.time())
        flush_s = CLOSE_FLUSH_S
        try:
            while True:
                try:
                    head = await client.request_head(head_timeout_s=self.head_timeout_s,
                                                     idle_timeout_s=self.idle_timeout_s, within_s=within)
                except HeadTimeout as e:
                    await send_error(cwriter, e.status, f"kvmon proxy: {e}")
                    return
                except ProtocolError as e:
                    await send_error(cwriter, e.status, f"kvmon proxy: bad request ({e})")
                    return
                if head is None:
                    return
                within = None
                admission.started(sock)
                req = head.event
                assert isinstance(req, h11.Request)
                if self._check_host and not host_header_allowed(head.get("host")):
                    await send_error(cwriter, 403, "kvmon proxy: it listens on loopback: ask it as localhost or "
                                                   "127.0.0.1 (Host header refused)")
                    return
                method, target = req.method.decode("ascii"), req.target.decode("latin-1")
                if method == "GET" and target.split("?", 1)[0] == stats.STATS_PATH:
                    async for _ in client.body():
                        pass
                    keep = await send_json(cwriter, 200, self.stats(), close=head.has_token("connection", "close"))
                    if not keep:
                        return
                    admission.waiting(sock)
                    continue
                self._maybe_probe()
                if upstream is None or upstream.writer.is_closing() or upstream.reader.at_eof():
                    if upstream is not None:  # the upstream closed the idle connection
                        upstream.writer.close()
                    try:
                        ureader, uwriter = await asyncio.wait_for(connect(self.upstream, self._ssl), CONNECT_TIMEOUT_S)
                    except (OSError, asyncio.TimeoutError) as e:
                        self._upstream_error()
                        reason = str(e) or type(e).__name__
                        await send_error(
                            cwriter, 502, f"kvmon proxy: cannot reach upstream {self.upstream.url} ({reason})"
                        )
                        return
                    upstream = _Link(ureader, uwriter, MessageReader(ureader))
                    usock = uwriter.get_extra_info("socket")
                    if usock is not None:
                        with contextlib.suppress(OSError):
                            usock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                keep = await self._exchange(head, method, target, client, cwriter, upstream)
                if not keep:
                    return
                admission.waiting(sock)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ProtocolError):
            return
        except asyncio.CancelledError:  # shutting down: end this connection quietly
            flush_s = 0.0
            return
        finally:
            if upstream is not None:
                upstream.writer.close()
            cwriter.close()
            # what the client has not taken yet goes before the socket is closed under it (a slow reader's tail)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cwriter.wait_closed(), flush_s)

    async def _exchange(self, head: Head, method: str, target: str, client: MessageReader,
                        cwriter: asyncio.StreamWriter, upstream: _Link) -> bool:
        """Forward one request and relay its response; True if both connections may be reused."""
        uwriter = upstream.writer
        meter = self._begin(method, target)
        raw_head = head.raw
        if self.upstream.prefix:
            raw_head = raw_head.replace(f" {target} ".encode("latin-1"),
                                        f" {self.upstream.prefix}{target} ".encode("latin-1"), 1)
        captured = bytearray()
        assert isinstance(head.event, h11.Request)
        upstream.messages.expect_response(head.event, request_sent=not head.has_body)

        async def pump_request() -> None:
            sent = 0
            try:
                uwriter.write(raw_head)
                sent = len(raw_head)
                await uwriter.drain()
                async for raw, payload in client.body():
                    if raw:
                        uwriter.write(raw)
                        sent += len(raw)
                    if len(captured) < MAX_REQUEST_CAPTURE:
                        captured.extend(payload[: MAX_REQUEST_CAPTURE - len(captured)])
                    await uwriter.drain()
            except asyncio.IncompleteReadError:
                raise ClientGone("client closed inside the request body") from None
            except (ConnectionError, OSError) as e:
                raise _UpstreamFailed(e) from None
            finally:
                with self._lock:
                    self._totals["bytes_to_upstream"] += sent
            upstream.messages.request_sent()
            if meter.model is None and captured:
                meter.model = model_from_request(bytes(captured))

        body_task = asyncio.ensure_future(pump_request())
        keep = False
        try:
            keep = await self._relay_response(meter, head, upstream, client, cwriter, body_task)
        except ClientGone:
            meter.aborted, meter.abort_reason = True, "client disconnected"
            keep = False
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ProtocolError, _UpstreamFailed) as e:
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
            stats.observe_prompt(self._prompts, meter, bytes(captured), self.upstream_kind, self._version_tuple)
            self._end(meter)
        return keep

    async def _no_answer(self, cwriter: asyncio.StreamWriter, meter: Meter, why: str, status: int = 502) -> bool:
        """The upstream failed before a byte of its answer: the client gets a 502 (504: it took too long) saying
        why."""
        self._upstream_error()
        await send_error(cwriter, status, f"kvmon proxy: upstream {self.upstream.url} {why}")
        meter.aborted, meter.abort_reason = True, f"upstream {why}"
        return False

    async def _wait_head(self, head_task: asyncio.Future[Head | None], body_task: asyncio.Future[None]) -> str:
        """Wait for the upstream's next head: "head" (it came, or its reading failed), "body_failed" (sending the
        request failed first) or "timeout" (no head ``upstream_timeout_s`` after the request went out whole: the
        client's own upload time is not the upstream's)."""
        loop = asyncio.get_running_loop()
        since = loop.time()
        while not head_task.done():
            if body_task.done() and body_task.exception() is not None:
                return "body_failed"
            waiting: set[asyncio.Future[Any]] = {head_task} if body_task.done() else {head_task, body_task}
            left = None
            if self.upstream_timeout_s is not None and body_task.done():
                left = max(0.0, self.upstream_timeout_s - (loop.time() - since))
            done, _ = await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                return "timeout"
            if body_task in done and head_task not in done:
                since = loop.time()  # the request is whole: the upstream's time starts now
        return "head"

    async def _relay_response(self, meter: Meter, req: Head, upstream: _Link, client: MessageReader,
                              cwriter: asyncio.StreamWriter, body_task: asyncio.Future[None]) -> bool:
        umsg = upstream.messages
        sent = 0
        try:
            while True:
                head_task = asyncio.ensure_future(umsg.response_head())
                waited = await self._wait_head(head_task, body_task)
                if waited != "head":
                    head_task.cancel()
                    with contextlib.suppress(BaseException):
                        await head_task
                if waited == "timeout":
                    limit = f"did not answer within {self.upstream_timeout_s:g} s (--upstream-timeout)"
                    if sent == 0:
                        return await self._no_answer(cwriter, meter, limit, status=504)
                    meter.aborted, meter.abort_reason = True, f"upstream {limit}"
                    return False
                if waited == "body_failed":
                    exc = body_task.exception()
                    assert exc is not None
                    if isinstance(exc, _UpstreamFailed) and sent == 0:
                        return await self._no_answer(cwriter, meter, f"failed before answering ({exc})")
                    meter.aborted, meter.abort_reason = True, abort_reason(exc)
                    return False
                try:
                    resp = await head_task
                except (ConnectionError, OSError) as e:
                    if sent == 0:
                        return await self._no_answer(cwriter, meter, "reset the connection before answering "
                                                                     f"({type(e).__name__})")
                    raise
                except ProtocolError as e:
                    if sent == 0:
                        return await self._no_answer(cwriter, meter, f"sent no HTTP answer ({e})")
                    raise
                if resp is None:
                    if sent == 0:
                        return await self._no_answer(cwriter, meter, "closed the connection before answering")
                    return False
                await to_client(cwriter, resp.raw)
                sent += len(resp.raw)
                if isinstance(resp.event, h11.InformationalResponse) and resp.status != 101:
                    continue  # interim (100 Continue, 103 Early Hints): the real answer follows
                break
            status = resp.status
            meter.set_response(status, resp.get("content-type"), resp.get("content-encoding"))
            if status == 101:  # protocol switch: plain two-way pipe from now on
                await body_task
                if umsg.switched:
                    rest = umsg.take_leftover()
                    if rest:
                        await to_client(cwriter, rest)
                early = client.take_leftover()
                if early:
                    upstream.writer.write(early)
                await pipe_both(client.reader, cwriter, upstream.reader, upstream.writer)
                return False
            keep = not (
                resp.has_token("connection", "close")
                or req.has_token("connection", "close")
                or (req.event.http_version == b"1.0" and not req.has_token("connection", "keep-alive"))
                or resp.first_line.startswith("HTTP/1.0")
            )
            try:
                async for raw, payload in umsg.body(relay_bad_framing=True, idle_timeout_s=self.upstream_timeout_s):
                    if raw:
                        await to_client(cwriter, raw)  # relay first: measuring must not delay the client
                        sent += len(raw)
                    if payload:
                        meter.feed(payload, self._clock())
            except Stalled as e:  # cut off here: what was relayed stays as it was, the client sees the close
                self._upstream_error()
                meter.aborted, meter.abort_reason = True, f"upstream {e}"
                return False
            if umsg.framing_broken:
                keep = False  # relayed until the upstream closed; the client judges the bytes
                meter.unparsed_lines += 1
            meter.finish_body(self._clock())
            if umsg.has_leftover:
                keep = False  # bytes past the answer: this connection cannot take another request
            if keep and not body_task.done():
                keep = False  # the upstream answered before reading the whole request
            return keep
        except asyncio.IncompleteReadError:
            meter.aborted, meter.abort_reason = True, "upstream closed mid-response"
            return False
        finally:
            with self._lock:
                self._totals["bytes_to_client"] += sent


class _UpstreamFailed(Exception):
    """Writing the request to the upstream failed (it reset or closed the connection)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__)


@dataclass
class _Link:
    """One kept upstream connection and the reader that follows its responses."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    messages: MessageReader


def abort_reason(e: BaseException) -> str:
    """Why a relayed exchange ended early, in a few words."""
    if isinstance(e, ClientGone) or (isinstance(e, ConnectionError) and "client" in str(e)):
        return "client disconnected"
    if isinstance(e, (_UpstreamFailed, ConnectionError)):
        return f"upstream connection lost ({e})"
    if isinstance(e, asyncio.IncompleteReadError):
        return "connection closed mid-message"
    return f"{type(e).__name__}: {e}"[:160]
