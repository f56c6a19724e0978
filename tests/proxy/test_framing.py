"""The proxy's HTTP/1.1 message reader: a chunked body at any split, pipelined requests kept apart exactly."""

from __future__ import annotations

import asyncio

import h11
import pytest
from raw_upstream import chunk

from kvmon.proxy.framing import MessageReader, ProtocolError


def _read_all(raw: bytes, step: int, request: bool = False) -> tuple[bytes, bytes, bytes, bytes]:
    """(head, the body's raw bytes, its payload, what came after) as MessageReader reads ``raw`` fed ``step`` at
    a time."""
    async def go() -> tuple[bytes, bytes, bytes, bytes]:
        reader = asyncio.StreamReader()
        for i in range(0, len(raw), step):
            reader.feed_data(raw[i : i + step])
        reader.feed_eof()
        messages = MessageReader(reader)
        if request:
            head = await messages.request_head()
        else:
            messages.expect_response(h11.Request(method="GET", target="/", headers=[("Host", "x")]),
                                     request_sent=True)
            head = await messages.response_head()
        assert head is not None
        body, payload = b"", b""
        async for r, p in messages.body():
            body, payload = body + r, payload + p
        return head.raw, body, payload, messages.take_leftover()

    return asyncio.run(go())


def test_the_reader_follows_a_chunked_body_at_any_split() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = chunk(b"hello ") + chunk(b"world") + b"0\r\nTrailer: x\r\n\r\n"
    for step in (1, 2, 3, 7, 64, len(head + body)):
        got = _read_all(head + body + b"HTTP/1.1 200 OK\r\n", step)
        assert got == (head, body, b"hello world", b"HTTP/1.1 200 OK\r\n"), step  # raw kept, the rest left
    with pytest.raises(ProtocolError):
        _read_all(head + b"xyz\r\n", 4)
    with pytest.raises(ProtocolError):
        _read_all(head + b"2\r\nabXX", 4)


def test_the_reader_splits_pipelined_requests_exactly() -> None:
    first = b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\n"
    second = b"GET /api/ps HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for step in (1, 5, 200):
        assert _read_all(b"\r\n" + first + b"hello" + second, step, request=True) == (first, b"hello", b"hello",
                                                                                        second)
