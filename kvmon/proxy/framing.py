"""HTTP/1.x as the proxy follows it, parsed by h11: where each request's and response's head and body end, what
the body carries, and the few answers the proxy makes itself.

The proxy forwards raw bytes; ``MessageReader`` reads them along with a fresh h11 connection per message and hands
back the raw bytes of the head and of each body piece (exactly what was received, up to the message's end) with
the payload they carry. Bytes after a message's end stay for the next message (pipelining). Framing that h11
accepts but a proxy forwarding raw bytes must not (a Content-Length given twice, Content-Length together with
Transfer-Encoding, a folded header line, a request line or header ended by a bare LF instead of CRLF) is refused
too: the upstream could read the message another way (request smuggling), or not at all. A head must arrive within
its deadline once its first byte has (and a connection's first head within it from the accept); a body may go quiet
for at most its idle time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11

READ_SIZE = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024

Event = h11.Request | h11.Response | h11.InformationalResponse


class ProtocolError(Exception):
    """The peer sent something that is not unambiguous HTTP/1.x; ``status`` is the answer it earns (400)."""

    status = 400


class HeadTimeout(ProtocolError):
    """A head was started but not finished in time (408)."""

    status = 408


class ClientGone(Exception):
    """The client closed its connection while the proxy was answering."""


class Stalled(Exception):
    """A peer sent nothing more for longer than it may, in the middle of a message."""


_BARE_LF = re.compile(rb"(?<!\r)\n")


async def to_client(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write to the client at once; a closed client raises ClientGone."""
    try:
        writer.write(data)
        await writer.drain()
    except (ConnectionError, OSError) as e:
        raise ClientGone(str(e) or type(e).__name__) from None
    if writer.is_closing():
        raise ClientGone("connection closed")


@dataclass
class Head:
    """A parsed request or response head; ``raw`` is forwarded byte for byte, ``event`` is h11's reading of it."""

    raw: bytes
    event: Event
    headers: list[tuple[str, str]]  # names as sent, values decoded (latin-1)

    @property
    def first_line(self) -> str:
        return self.raw.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")

    @property
    def status(self) -> int:
        return int(getattr(self.event, "status_code", 0))

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def has_token(self, name: str, token: str) -> bool:
        value = ",".join(v for k, v in self.headers if k.lower() == name.lower())
        return token.lower() in (t.strip().lower() for t in value.split(","))

    @property
    def has_body(self) -> bool:
        """Whether a request carries a body (a Content-Length above 0, or chunked)."""
        return self.get("transfer-encoding") is not None or (self.get("content-length") or "0").strip() != "0"


def _unambiguous(raw: bytes, who: str) -> None:
    """Refuse what h11 reads one way and another server might read another (h11 merges a repeated
    Content-Length and lets Transfer-Encoding win over it; the raw head still carries both)."""
    if b"\n " in raw or b"\n\t" in raw:
        raise ProtocolError(f"{who} folded a header line over two (obsolete line folding)")
    names = [line.split(b":", 1)[0].strip().lower() for line in raw.split(b"\n")[1:] if b":" in line]
    lengths = [line for line in raw.split(b"\n")[1:] if line.split(b":", 1)[0].strip().lower() == b"content-length"]
    if len(lengths) > 1 or any(b"," in line for line in lengths):
        raise ProtocolError(f"{who} gave Content-Length more than once")
    if lengths and b"transfer-encoding" in names:
        raise ProtocolError(f"{who} gave both Content-Length and Transfer-Encoding")


class MessageReader:
    """One direction of one connection, one message at a time: ``request_head`` (the client's side) or
    ``response_head`` (the upstream's), then ``body``."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self._leftover = b""  # bytes past the last message's end: the start of the next one
        self._conn: h11.Connection | None = None
        self.eof = False
        self.framing_broken = False  # the last body's framing broke (its bytes were relayed as they came)

    async def _read(self, timeout_s: float | None) -> bytes:
        return await asyncio.wait_for(self.reader.read(READ_SIZE), timeout_s)

    async def request_head(self, *, head_timeout_s: float | None = None, idle_timeout_s: float | None = None,
                           within_s: float | None = None) -> Head | None:
        """The next request's head; None when the client closed (or stayed idle past ``idle_timeout_s``, or sent
        nothing within ``within_s``) before a byte of it. Raises ProtocolError (HeadTimeout past ``head_timeout_s``
        from its first byte, or past ``within_s`` from now)."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        return await self._head(conn, "the client", head_timeout_s, idle_timeout_s, within_s)

    def expect_response(self, request: h11.Request, *, request_sent: bool) -> None:
        """Get ready to read the answer to ``request`` (h11 frames a response by its request: HEAD, upgrades).
        ``request_sent``: the request's body is already complete (a protocol switch needs that)."""
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        headers = list(request.headers.raw_items())
        if not any(k.lower() == b"host" for k, _ in headers):
            headers.append((b"Host", b"upstream"))  # an HTTP/1.0 request: h11 only follows along, nothing is sent
        conn.send(h11.Request(method=request.method, target=request.target, headers=headers))
        self._conn = conn
        if request_sent:
            self.request_sent()

    async def response_head(self) -> Head | None:
        """The next response head (an interim 1xx, or the answer) to the expected request; None when the upstream
        closed before a byte of it. Raises ProtocolError for a head h11 cannot read or that is ambiguous."""
        assert self._conn is not None and self._conn.our_role is h11.CLIENT, "response_head() before expect_response()"
        return await self._head(self._conn, "the upstream", None, None)

    def request_sent(self) -> None:
        """The request's body is complete (for the response reader's state: a 101 needs a finished request)."""
        conn = self._conn
        if conn is not None and conn.our_role is h11.CLIENT and conn.our_state is h11.SEND_BODY:
            with contextlib.suppress(h11.LocalProtocolError):
                conn.send(h11.EndOfMessage())

    async def _head(self, conn: h11.Connection, who: str, head_timeout_s: float | None,
                    idle_timeout_s: float | None, within_s: float | None = None) -> Head | None:
        loop = asyncio.get_running_loop()
        until = None if within_s is None else loop.time() + within_s
        prior = conn.trailing_data[0]  # bytes h11 already holds (after an interim 1xx head)
        raw = bytearray(prior + self._leftover)
        fed = len(prior)
        self._leftover = b""
        started: float | None = loop.time() if raw else None
        while True:
            if fed == 0 and conn.our_role is h11.SERVER:
                while raw[:2] == b"\r\n":  # stray CRLF between requests: dropped, not forwarded
                    del raw[:2]
            if len(raw) > fed:
                conn.receive_data(bytes(raw[fed:]))
                fed = len(raw)
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as e:
                raise ProtocolError(f"{who} sent a malformed head ({e})") from None
            if isinstance(event, (h11.Request, h11.Response, h11.InformationalResponse)):
                rest = conn.trailing_data[0]
                head_raw = bytes(raw[: len(raw) - len(rest)])
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers.raw_items()]
                if conn.our_role is h11.SERVER and _BARE_LF.search(head_raw):
                    raise ProtocolError(f"{who} ended a line of its request head with a bare LF (HTTP needs CRLF)")
                _unambiguous(head_raw, who)
                self._conn = conn
                return Head(head_raw, event, headers)
            if event is not h11.NEED_DATA:  # ConnectionClosed, or a peer that sent no head at all
                if not raw:
                    return None
                raise ProtocolError(f"{who} closed the connection inside an HTTP head")
            timeout = idle_timeout_s if started is None else (
                None if head_timeout_s is None else max(0.0, head_timeout_s - (loop.time() - started)))
            if until is not None:
                timeout = max(0.0, until - loop.time()) if timeout is None else min(timeout, max(0.0, until
                                                                                                 - loop.time()))
            try:
                data = await self._read(timeout)
            except asyncio.TimeoutError:
                if started is None:
                    return None  # idle: the client sent nothing; closed quietly
                raise HeadTimeout(f"{who} did not finish its request head in time ({head_timeout_s:g} s)") from None
            if not data:
                self.eof = True
                if not raw:
                    return None
                raise ProtocolError(f"{who} closed the connection inside an HTTP head")
            if started is None:
                started = loop.time()
            raw += data

    async def body(self, *, relay_bad_framing: bool = False,
                   idle_timeout_s: float | None = None) -> AsyncIterator[tuple[bytes, bytes]]:
        """(raw bytes, payload) of the current message's body, piece by piece as it arrives, ending at the
        message's end; bytes past it are kept for the next message. Raises asyncio.IncompleteReadError when the
        peer closed before the end, Stalled when it sent nothing for ``idle_timeout_s``, and ProtocolError on bad
        framing, unless ``relay_bad_framing``: then every byte from there on comes as raw with no payload until the
        peer closes (``framing_broken`` is set)."""
        conn = self._conn
        assert conn is not None, "body() before a head"
        pending = conn.trailing_data[0]  # body bytes that came with the head
        while True:
            payload = bytearray()
            ended = False
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as e:
                    if self.eof:
                        raise asyncio.IncompleteReadError(b"", None) from None
                    if not relay_bad_framing:
                        raise ProtocolError(f"bad framing ({e})") from None
                    self.framing_broken = True
                    if payload:
                        yield b"", bytes(payload)
                    async for raw in self._until_eof(pending, idle_timeout_s):
                        yield raw, b""
                    return
                if event is h11.NEED_DATA:
                    break
                if isinstance(event, h11.Data):
                    payload += event.data
                elif isinstance(event, h11.EndOfMessage):
                    ended = True
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise asyncio.IncompleteReadError(b"", None)
                else:  # another head (a pipelined message) cannot come before this one's end
                    break
            if ended:
                after = conn.trailing_data[0]
                cut = max(0, len(pending) - len(after))
                self._leftover = after
                yield pending[:cut], bytes(payload)
                return
            if pending or payload:
                yield pending, bytes(payload)
            if conn.their_state is h11.SWITCHED_PROTOCOL:
                return
            data = await self._read_within(idle_timeout_s)
            if not data:
                self.eof = True
            pending = data
            conn.receive_data(data)

    async def _until_eof(self, first: bytes, idle_timeout_s: float | None) -> AsyncIterator[bytes]:
        if first:
            yield first
        while data := await self._read_within(idle_timeout_s):
            yield data
        self.eof = True

    async def _read_within(self, idle_timeout_s: float | None) -> bytes:
        try:
            return await self._read(idle_timeout_s)
        except asyncio.TimeoutError:
            raise Stalled(f"sent nothing for {idle_timeout_s:g} s in the middle of its message") from None

    @property
    def has_leftover(self) -> bool:
        """Whether bytes came past the last message's end (from an upstream: it cannot take the next request)."""
        return bool(self._leftover)

    @property
    def switched(self) -> bool:
        """Whether the last message switched protocols (101 to a proposed upgrade): raw bytes both ways follow."""
        return self._conn is not None and self._conn.their_state is h11.SWITCHED_PROTOCOL

    def take_leftover(self) -> bytes:
        """Bytes read past the last message (after a protocol switch: the new protocol's first bytes)."""
        rest = self._conn.trailing_data[0] if self._conn is not None and self.switched else self._leftover
        self._leftover = b""
        return rest


async def pipe_both(
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


async def send_json(writer: asyncio.StreamWriter, status: int, obj: Any, *, close: bool) -> bool:
    body = json.dumps(obj, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    return not close


async def send_error(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    """An error the proxy itself makes, in Ollama's ``{"error": "..."}`` shape, then close."""
    with contextlib.suppress(ConnectionError, OSError):
        await send_json(writer, status, {"error": message}, close=True)
