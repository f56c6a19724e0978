"""HTTP/1.x framing as the proxy follows it: heads, chunked bodies, and the few answers the proxy makes itself.

The proxy forwards raw bytes; these only read along (where a head ends, where a chunked body ends, what it
carries) and write the proxy's own JSON answers and errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

READ_SIZE = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024


class ProtocolError(Exception):
    """The peer sent something that is not HTTP/1.x."""


class ClientGone(Exception):
    """The client closed its connection while the proxy was answering."""


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


async def send_error(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    """An error the proxy itself makes, in Ollama's ``{"error": "..."}`` shape, then close."""
    with contextlib.suppress(ConnectionError, OSError):
        await send_json(writer, status, {"error": message}, close=True)
