"""The proxy against hostile clients and upstreams: ambiguous framing refused with 400 before anything is forwarded,
half-sent heads timed out, an upstream that resets before answering turned into a 502 with its reason, and twenty
streams at once relayed without a byte lost, added or moved.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from helpers_hostile import RawServer, reset_before_answering
from helpers_http import wait_until
from test_proxy_stream import Script, Upstream, chunk, get_stats, recv_all

from kvmon.proxy.server import ProxyServer


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    try:
        yield up
    finally:
        up.stop()


@pytest.fixture
def proxy(upstream: Upstream) -> Iterator[ProxyServer]:
    p = ProxyServer(upstream.url, port=0, head_timeout_s=0.5)
    p.start()
    assert wait_until(lambda: p.upstream_version is not None, 5)
    try:
        yield p
    finally:
        p.stop()


def _raw(p: ProxyServer, data: bytes, timeout: float = 5.0) -> bytes:
    s = socket.create_connection(("127.0.0.1", p.port), timeout=timeout)
    try:
        s.sendall(data)
        return recv_all(s)
    finally:
        s.close()


def _status(reply: bytes) -> int | None:
    first = reply.split(b"\r\n", 1)[0].split(b" ")
    return int(first[1]) if len(first) > 1 and first[1].isdigit() else None


# ------------------------------------------------------------------------------------------------ 12


AMBIGUOUS = {
    "duplicate Content-Length": b"Content-Length: 2\r\nContent-Length: 2\r\n",
    "two Content-Length values": b"Content-Length: 2, 2\r\n",
    "signed Content-Length": b"Content-Length: +2\r\n",
    "Transfer-Encoding xchunked": b"Transfer-Encoding: xchunked\r\n",
    "Content-Length and Transfer-Encoding": b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
    "space before the colon": b"Content-Length : 2\r\n",
}


@pytest.mark.parametrize("name", list(AMBIGUOUS))
def test_ambiguous_framing_is_refused_with_400_and_not_forwarded(upstream: Upstream, proxy: ProxyServer,
                                                                 name: str) -> None:
    upstream.routes["/api/chat"] = lambda body: Script([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    head = b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\n" + AMBIGUOUS[name] + b"\r\n"
    reply = _raw(proxy, head + b"{}" + b"0\r\n\r\n")
    assert _status(reply) == 400, reply[:200]
    assert b"kvmon proxy" in reply
    time.sleep(0.1)
    assert upstream.requests == []


def test_a_half_sent_head_is_timed_out(proxy: ProxyServer) -> None:
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    try:
        s.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")  # and nothing more
        t0 = time.monotonic()
        reply = recv_all(s)
        waited = time.monotonic() - t0
    finally:
        s.close()
    assert _status(reply) == 408, reply[:200]
    assert waited < 4.0


def test_an_idle_client_connection_is_closed_quietly(upstream: Upstream) -> None:
    p = ProxyServer(upstream.url, port=0, head_timeout_s=0.5, idle_timeout_s=0.5, probe_version=False)
    p.start()
    try:
        s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
        t0 = time.monotonic()
        reply = recv_all(s)  # no byte sent: after the idle time the proxy closes without an answer
        s.close()
    finally:
        p.stop()
    assert reply == b"" and time.monotonic() - t0 < 4.0


# ------------------------------------------------------------------------------------------------ 11


def test_an_upstream_reset_before_answering_gives_a_502_with_the_reason() -> None:
    with RawServer(reset_before_answering) as dead:
        where = dead.url.removeprefix("http://")
        p = ProxyServer(dead.url, port=0, probe_version=False)
        p.start()
        try:
            chat = b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
            replies = [_raw(p, chat) for _ in range(3)]
            totals = get_stats(p)["totals"]
        finally:
            p.stop()
    for reply in replies:
        assert _status(reply) == 502, reply[:200]
        doc = json.loads(reply.split(b"\r\n\r\n", 1)[1])
        assert "before answering" in doc["error"] and where in doc["error"], doc
    assert totals["upstream_errors"] == 3


# ------------------------------------------------------------------------------------------------ 20 streams


def test_twenty_concurrent_streams_lose_and_move_no_byte(upstream: Upstream) -> None:
    def stream(body: bytes) -> Script:
        i = json.loads(body)["i"]
        lines = [json.dumps({"message": {"content": f"s{i}-t{k}-" + "x" * (k * 37 % 300)}, "done": False}).encode()
                 + b"\n" for k in range(40)]
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
        return Script([head, *[chunk(x) for x in lines], b"0\r\n\r\n"], delay_s=0.001)

    upstream.routes["/api/chat"] = stream
    p = ProxyServer(upstream.url, port=0)
    p.start()
    results: dict[int, bytes] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        body = json.dumps({"model": f"m{i}", "i": i}).encode()
        s = socket.create_connection(("127.0.0.1", p.port), timeout=30)
        s.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        got = recv_all(s)
        s.close()
        with lock:
            results[i] = got

    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        p.stop()
    assert sorted(results) == list(range(20))
    for i, got in results.items():
        expected = b"".join(stream(json.dumps({"i": i}).encode()).pieces)
        assert got == expected, f"stream {i}: {len(got)} bytes, expected {len(expected)}"
