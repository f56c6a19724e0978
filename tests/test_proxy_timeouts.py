"""The proxy answers when its upstream does not, over real sockets: no answer in ``--upstream-timeout`` → 504 with a
JSON reason; an answer that stops in the middle → the bytes relayed stay exactly as they were and the client's
connection is closed; a request head with bare-LF line ends → 400, and nothing reaches the upstream.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from helpers_hostile import RawServer, drip_head, read_request_head
from test_proxy_stream import Script, Upstream, chunk, get_stats, recv_all

from kvmon.cli import build_parser
from kvmon.cli import proxy as command
from kvmon.proxy import UPSTREAM_TIMEOUT_S
from kvmon.proxy.server import ProxyServer

LIMIT_S = 0.5


def _silent(sock: socket.socket, stopped: threading.Event) -> None:
    """Read the request, then say nothing (the connection stays open)."""
    read_request_head(sock)
    stopped.wait()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    try:
        yield up
    finally:
        up.stop()


def _proxy(url: str, limit: float | None = LIMIT_S) -> ProxyServer:
    p = ProxyServer(url, port=0, probe_version=False, upstream_timeout_s=limit)
    p.start()
    return p


def _exchange(p: ProxyServer, data: bytes, timeout: float = 10.0) -> tuple[bytes, float]:
    s = socket.create_connection(("127.0.0.1", p.port), timeout=timeout)
    try:
        t0 = time.monotonic()
        s.sendall(data)
        reply = recv_all(s)
        return reply, time.monotonic() - t0
    finally:
        s.close()


CHAT = (b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: 2\r\n\r\n{}")


@pytest.mark.parametrize("handler", [_silent, drip_head(0.05)], ids=["silent", "head-dripped"])
def test_an_upstream_that_does_not_answer_in_time_gets_the_client_a_504_with_the_reason(handler) -> None:
    with RawServer(handler) as silent:
        where = silent.url.removeprefix("http://")
        p = _proxy(silent.url)
        try:
            reply, took = _exchange(p, CHAT)
            totals = get_stats(p)["totals"]
        finally:
            p.stop()
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 504 Gateway Timeout"), reply[:200]
    assert b"application/json" in head
    error = json.loads(body)["error"]
    assert "did not answer within 0.5 s" in error and where in error, error
    assert LIMIT_S <= took < LIMIT_S + 3.0
    assert totals["upstream_errors"] == 1 and totals["aborted"] == 1


def test_a_stream_that_stalls_mid_body_is_cut_off_with_the_bytes_sent_intact(upstream: Upstream) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    lines = [json.dumps({"message": {"content": f"token {i}"}, "done": False}).encode() + b"\n" for i in range(3)]
    sent = [head, *[chunk(x) for x in lines]]
    upstream.routes["/api/chat"] = lambda body: Script([*sent, b""], gated=True)  # then waits on the gate: a stall
    p = _proxy(upstream.url)
    try:
        reply, took = _exchange(p, CHAT)
        stats = get_stats(p)
    finally:
        for _ in range(3):
            upstream.gate.release()
        p.stop()
    assert reply == b"".join(sent[:2])  # the head and the first piece came before the gate: exactly those bytes
    assert LIMIT_S <= took < LIMIT_S + 3.0
    assert stats["totals"]["aborted"] == 1 and stats["totals"]["upstream_errors"] == 1


def test_a_slow_client_upload_is_not_the_upstreams_time(upstream: Upstream) -> None:
    """The limit starts once the whole request is with the upstream: a client that sends its body late is served."""
    upstream.routes["/api/chat"] = lambda body: Script([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
    p = _proxy(upstream.url)
    try:
        s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
        s.sendall(CHAT[:-2])  # the head; the body comes later than the limit
        time.sleep(LIMIT_S * 2)
        s.sendall(b"{}")
        reply = recv_all(s)
        s.close()
    finally:
        p.stop()
    assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b"ok"), reply


def test_a_slow_answer_that_keeps_coming_is_relayed_whole(upstream: Upstream) -> None:
    """Quiet gaps shorter than the limit, however many: the limit is on silence, not on the answer's length."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    pieces = [head, *[chunk(b'{"n": %d}\n' % i) for i in range(8)], b"0\r\n\r\n"]
    upstream.routes["/api/chat"] = lambda body: Script(pieces, delay_s=LIMIT_S / 3, close_after=True)
    p = _proxy(upstream.url)
    try:
        reply, took = _exchange(p, CHAT)
    finally:
        p.stop()
    assert reply == b"".join(pieces) and took > LIMIT_S


BARE_LF = {
    "every line": b"POST /api/chat HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 2\n\n{}",
    "one header": b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\nContent-Length: 2\r\n\r\n{}",
    "the request line": b"GET /api/tags HTTP/1.1\nHost: 127.0.0.1\r\n\r\n",
}


@pytest.mark.parametrize("name", list(BARE_LF))
def test_a_bare_lf_request_is_refused_with_400_and_not_forwarded(upstream: Upstream, name: str) -> None:
    upstream.routes["/api/chat"] = upstream.routes["/api/tags"] = lambda body: Script(
        [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    p = _proxy(upstream.url)
    try:
        reply, took = _exchange(p, BARE_LF[name])
    finally:
        p.stop()
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), reply[:200]
    assert "bare LF" in json.loads(body)["error"]
    assert took < 3.0
    time.sleep(0.1)
    assert upstream.requests == []


def test_no_limit_waits_as_long_as_the_upstream_takes(upstream: Upstream) -> None:
    upstream.routes["/api/chat"] = lambda body: Script(  # the head's end a second later
        [b"HTTP/1.1 200 OK\r\n", b"Content-Length: 2\r\n", b"\r\nok"], delay_s=1.0)
    p = _proxy(upstream.url, limit=0)
    try:
        reply, took = _exchange(p, CHAT)
    finally:
        p.stop()
    assert reply.startswith(b"HTTP/1.1 200 OK") and took >= 1.0


def test_the_option_its_default_and_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["proxy", "--upstream", "http://127.0.0.1:9"])
    assert args.upstream_timeout == UPSTREAM_TIMEOUT_S == 300.0
    proxy_help = next(a for a in parser._subparsers._group_actions[0].choices["proxy"]._actions  # type: ignore[union-attr]
                      if "--upstream-timeout" in a.option_strings).help
    assert "300" in (proxy_help or "") % {"default": UPSTREAM_TIMEOUT_S} and "504" in (proxy_help or "")
    bad = parser.parse_args(["proxy", "--listen", "127.0.0.1:0", "--upstream-timeout", "-1"])
    assert command.run(bad) == 2
    assert "--upstream-timeout" in capsys.readouterr().err
